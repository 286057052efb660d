// The host wrapper of vLLM's CUDA routing kernels built from vLLM's own source tree (measure/engine_build.py):
// it registers vLLM's four routing entry points and its moe_align_block_size, compiled from the user's copy of csrc/moe/*.cu, as torch ops in
// a namespace of ours (torch.ops.moe_routing_vllm.*), with vLLM's own schemas. Nothing of vLLM is copied here:
// the functions and their declarations come from that source tree (csrc/moe/moe_ops.h).
#include <torch/csrc/stable/library.h>

#include "moe/moe_ops.h"

STABLE_TORCH_LIBRARY(moe_routing_vllm, m) {
  m.def("topk_softmax(Tensor! topk_weights, Tensor! topk_indices, Tensor! token_expert_indices, "
        "Tensor gating_output, bool renormalize, Tensor? bias, Tensor? is_padding) -> ()");
  m.def("topk_sigmoid(Tensor! topk_weights, Tensor! topk_indices, Tensor! token_expert_indices, "
        "Tensor gating_output, bool renormalize, Tensor? bias, float routed_scaling_factor, "
        "Tensor? is_padding) -> ()");
  m.def("topk_softplus_sqrt(Tensor! topk_weights, Tensor! topk_indices, Tensor! token_expert_indices, "
        "Tensor gating_output, bool renormalize, float routed_scaling_factor, Tensor? bias, Tensor? input_ids, "
        "Tensor? tid2eid, Tensor? is_padding, Tensor? bias_vl=None, int image_sentinel_lo=0) -> ()");
  m.def("grouped_topk(Tensor scores, int n_group, int topk_group, int topk, bool renormalize, "
        "float routed_scaling_factor, Tensor bias, int scoring_func) -> (Tensor, Tensor)");
  m.def("moe_align_block_size(Tensor topk_ids, int num_experts, int block_size, Tensor! sorted_token_ids, "
        "Tensor! experts_ids, Tensor! num_tokens_post_pad, Tensor? maybe_expert_map, "
        "Tensor(a!)? scatter_idx=None) -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(moe_routing_vllm, CUDA, m) {
  m.impl("topk_softmax", TORCH_BOX(&topk_softmax));
  m.impl("topk_sigmoid", TORCH_BOX(&topk_sigmoid));
  m.impl("topk_softplus_sqrt", TORCH_BOX(&topk_softplus_sqrt));
  m.impl("grouped_topk", TORCH_BOX(&grouped_topk));
  m.impl("moe_align_block_size", TORCH_BOX(&moe_align_block_size));
}
