// The host path of route(): one C++ call validates a routing call and launches its cached Triton kernel.
//
// Why: in eager mode every route() call pays its host time on every layer of every token. The Python
// path (check_call, the launcher cache's key, Triton's C launcher) costs more than a single ATen op;
// here the same work reads tensor metadata directly and calls cuLaunchKernel (or cuLaunchKernelEx) once.
//
// What it may do: *accept* a call only when the Python path would accept it with the same normalised
// call, and launch only the kernel binary the Python path registered for the same key (everything
// the rule and Triton's specialisation depend on). Anything else, including every invalid call, is
// *declined* (route returns None) and takes the Python path, which raises the documented errors. So the
// error messages live in one place (call.py), and this file never needs to be right about an error.
//
// Built on first use by torch.utils.cpp_extension (kernels/host_launch.py). The CUDA driver is opened
// at run time, so building needs neither CUDA headers nor a CUDA build of torch.

#include <torch/csrc/autograd/python_variable.h>

#include <ATen/ops/empty.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

// --- the driver entry point ------------------------------------------------------------------------

using CUresult = int;
using CUfunction = void*;
using CUstream = void*;
using LaunchKernelFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, CUstream, void**, void**);
using GetErrorStringFn = CUresult (*)(CUresult, const char**);
LaunchKernelFn cu_launch_kernel = nullptr;
GetErrorStringFn cu_get_error_string = nullptr;

// cuLaunchKernelEx (CUDA 12.0+), for kernels launched with programmatic dependent launch (launch.with_device):
// the structures as cuda.h lays them out, with only the attribute used here.
struct LaunchAttribute {
  int id;  // CUlaunchAttributeID
  char pad[4];
  union {
    char bytes[64];
    int programmatic_stream_serialization_allowed;
  } value;
};
struct LaunchConfig {
  unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared;
  CUstream stream;
  LaunchAttribute* attrs;
  unsigned num_attrs;
};
static_assert(sizeof(LaunchAttribute) == 72 && sizeof(LaunchConfig) == 56, "cuda.h's CUlaunchAttribute / CUlaunchConfig");
constexpr int kProgrammaticStreamSerialization = 6;  // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
using LaunchKernelExFn = CUresult (*)(const LaunchConfig*, CUfunction, void**, void**);
LaunchKernelExFn cu_launch_kernel_ex = nullptr;

// --- configuration from Python (single sources of truth stay in Python) ----------------------------

struct Config {
  bool ready = false;
  int64_t max_experts = 0, max_topk = 0, max_groups = 0;
  std::vector<int64_t> class_starts;  // launch.TOKEN_CLASS_STARTS: first token count of each later class
  PyObject* raw_stream = nullptr;     // torch._C._cuda_getCurrentRawStream
  PyObject* current_device = nullptr; // torch._C._cuda_getDevice
  PyObject* runtime_knobs = nullptr;  // triton.knobs.runtime (launch hooks)
  PyObject* enter_name = nullptr;
  PyObject* exit_name = nullptr;
  PyObject* calls_name = nullptr;
} config;

// --- the call ----------------------------------------------------------------------------------------

struct Call {  // call.RoutingCall, normalised
  int64_t tokens, experts, topk;
  bool softmax;
  int64_t groups, kept;
  bool renormalize;
  double scale;
};

struct Args {  // route()'s arguments, borrowed
  PyObject *logits, *topk, *scoring, *bias, *groups, *kept, *renormalize, *scale, *out;
};

bool exact_int(PyObject* o, int64_t minimum, int64_t* value) {
  if (!PyLong_CheckExact(o)) return false;
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return false;
  }
  *value = v;
  return v >= minimum;
}

bool is_logit_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

bool is_bias_dtype(at::ScalarType t) {
  return is_logit_dtype(t) || t == at::kDouble;
}

// The checks of call.check_call, as accept-or-decline; true fills `call`. Tensors are not required to
// be on a GPU here (launch-time conditions are checked by the caller).
bool parse(const Args& a, Call* call) {
  if (!THPVariable_CheckExact(a.logits)) return false;
  const at::Tensor& logits = THPVariable_Unpack(a.logits);
  if (logits.dim() != 2 || !is_logit_dtype(logits.scalar_type())) return false;
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  if (experts < 1 || experts > config.max_experts) return false;

  bool softmax;
  if (!PyUnicode_CheckExact(a.scoring)) return false;
  if (PyUnicode_CompareWithASCIIString(a.scoring, "sigmoid") == 0) {
    softmax = false;
  } else if (PyUnicode_CompareWithASCIIString(a.scoring, "softmax") == 0) {
    softmax = true;
  } else {
    return false;
  }
  if (a.renormalize != Py_True && a.renormalize != Py_False) return false;
  double scale;
  if (PyFloat_CheckExact(a.scale)) {
    scale = PyFloat_AS_DOUBLE(a.scale);
  } else if (PyLong_CheckExact(a.scale)) {
    scale = PyLong_AsDouble(a.scale);
    if (scale == -1.0 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
  } else {
    return false;
  }
  if (!std::isfinite(scale)) return false;

  int64_t groups, kept, topk;
  if (!exact_int(a.groups, 1, &groups) || !exact_int(a.kept, 1, &kept)) return false;
  if (experts % groups) return false;
  if (kept >= groups) {
    groups = kept = 1;
  } else if (groups > config.max_groups) {
    return false;
  }
  if (!exact_int(a.topk, 1, &topk)) return false;
  if (topk > kept * (experts / groups) || topk > config.max_topk) return false;

  if (a.bias != Py_None) {
    if (!THPVariable_CheckExact(a.bias)) return false;
    const at::Tensor& bias = THPVariable_Unpack(a.bias);
    if (!is_bias_dtype(bias.scalar_type()) || bias.dim() != 1 || bias.size(0) != experts) return false;
    if (bias.device() != logits.device()) return false;
  }
  if (a.out != Py_None) {
    if (!(PyTuple_CheckExact(a.out) && PyTuple_GET_SIZE(a.out) == 2) &&
        !(PyList_CheckExact(a.out) && PyList_GET_SIZE(a.out) == 2)) {
      return false;
    }
    for (int i = 0; i < 2; ++i) {
      PyObject* o = PySequence_Fast_GET_ITEM(a.out, i);
      if (!THPVariable_CheckExact(o)) return false;
      const at::Tensor& t = THPVariable_Unpack(o);
      if (t.scalar_type() != (i == 0 ? at::kFloat : at::kInt)) return false;
      if (t.dim() != 2 || t.size(0) != tokens || t.size(1) != topk) return false;
      if (t.device() != logits.device()) return false;
    }
  }
  *call = Call{tokens, experts, topk, softmax, groups, kept, a.renormalize == Py_True, scale};
  return true;
}

// --- the launcher cache's key: everything the rule and Triton's specialisation depend on ---------

struct Key {
  int64_t experts, topk, softmax, groups, kept, renormalize, token_class;
  int64_t logits_dtype, bias_dtype, device, logits_aligned, bias_aligned, stride_class, dense_out;
  bool operator==(const Key& o) const { return std::memcmp(this, &o, sizeof(Key)) == 0; }
};

int64_t token_class(int64_t tokens) {
  int64_t c = 0;
  for (int64_t start : config.class_starts) c += tokens >= start;
  return c;
}

int64_t int_class(int64_t v) {  // launch._int_class: what Triton specialises an int argument on
  return v == 1 ? 1 : (v % 16 == 0 ? 16 : 0);
}

// launch.dense_outputs: weights and ids [T, K] with strides (K, 1), 16-byte aligned (what route() allocates is)
bool dense_output(const at::Tensor& t, int64_t topk) {
  return t.stride(0) == topk && t.stride(1) == 1 && (reinterpret_cast<uintptr_t>(t.data_ptr()) & 15) == 0;
}

Key make_key(const Call& c, const at::Tensor& logits, PyObject* bias_obj, PyObject* out_obj) {
  Key k;
  std::memset(&k, 0, sizeof(Key));  // padding-free, but memcmp compares every byte
  k.experts = c.experts;
  k.topk = c.topk;
  k.softmax = c.softmax;
  k.groups = c.groups;
  k.kept = c.kept;
  k.renormalize = c.renormalize;
  k.token_class = token_class(c.tokens);
  k.logits_dtype = static_cast<int64_t>(logits.scalar_type());
  k.device = logits.device().index();
  k.logits_aligned = (reinterpret_cast<uintptr_t>(logits.data_ptr()) & 15) == 0;
  k.stride_class = int_class(logits.stride(0));
  if (bias_obj == Py_None) {
    k.bias_dtype = -1;
    k.bias_aligned = -1;
  } else {
    const at::Tensor& bias = THPVariable_Unpack(bias_obj);
    k.bias_dtype = static_cast<int64_t>(bias.scalar_type());
    k.bias_aligned = (reinterpret_cast<uintptr_t>(bias.data_ptr()) & 15) == 0;
  }
  k.dense_out = out_obj == Py_None ||
                (dense_output(THPVariable_Unpack(PySequence_Fast_GET_ITEM(out_obj, 0)), c.topk) &&
                 dense_output(THPVariable_Unpack(PySequence_Fast_GET_ITEM(out_obj, 1)), c.topk));
  return k;
}

// Layouts the Python path would copy first (it passes contiguous copies): declined here.
bool plain_layout(const Call& c, const at::Tensor& logits, PyObject* bias_obj) {
  if (logits.stride(1) != 1 && c.experts != 1) return false;
  if (bias_obj != Py_None) {
    const at::Tensor& bias = THPVariable_Unpack(bias_obj);
    if (bias.stride(0) != 1 && c.experts != 1) return false;
  }
  return true;
}

// --- registered kernels --------------------------------------------------------------------------

enum Param : int8_t {  // the kernels' runtime arguments (kernels/_bitonic.py, _rounds.py), by name
  kLogitsPtr, kBiasPtr, kStrideLogitsRow, kWeightsPtr, kIdsPtr, kStrideWeightsRow, kStrideWeightsCol,
  kStrideIdsRow, kStrideIdsCol, kNumRows, kScale, kParamKinds
};
constexpr int kMaxParams = kParamKinds;

struct Entry {
  Key key;
  CUfunction function;
  unsigned threads, shared;
  bool pdl;  // launched with programmatic dependent launch (cuLaunchKernelEx)
  int64_t rows_per_program;
  int n_params;
  int8_t params[kMaxParams];
};

std::vector<Entry> entries;  // few (one per shape class in use); a hit moves to the front
uint64_t launch_count = 0;    // launches made here (tests check that calls took this path)

Entry* find(const Key& k) {
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].key == k) {
      if (i) std::swap(entries[i], entries[0]);
      return &entries[0];
    }
  }
  return nullptr;
}

bool fits_int32(int64_t v) { return v >= INT32_MIN && v <= INT32_MAX; }

// --- Python entry points -------------------------------------------------------------------------

enum Verdict { kError = -1, kDeclined = 0, kAccepted = 1 };

// route()'s nine arguments, checked: kAccepted fills `a` and `c`; `plain` also requires a layout that
// the Python path launches as it is (not a copy). kError: a Python error is set.
Verdict accept(PyObject* const* args, Py_ssize_t nargs, bool plain, Args* a, Call* c) {
  if (nargs != 9) {
    PyErr_Format(PyExc_TypeError, "expected route()'s 9 arguments, got %zd", nargs);
    return kError;
  }
  *a = Args{args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7], args[8]};
  if (!config.ready || !parse(*a, c)) return kDeclined;
  if (plain && !plain_layout(*c, THPVariable_Unpack(a->logits), a->bias)) return kDeclined;
  return kAccepted;
}

PyObject* not_accepted(Verdict v) {  // what an entry point returns for a call it does not accept
  if (v == kError) return nullptr;
  Py_RETURN_NONE;
}

bool hooks_installed() {
  PyObject* names[2] = {config.enter_name, config.exit_name};
  for (PyObject* name : names) {
    PyObject* hook = PyObject_GetAttr(config.runtime_knobs, name);
    if (!hook) {
      PyErr_Clear();
      return true;  // unknown layout: let Triton's own path decide
    }
    PyObject* calls = PyObject_GetAttr(hook, config.calls_name);
    if (!calls) {
      PyErr_Clear();
      calls = hook;
      Py_INCREF(calls);
    }
    int truth = PyObject_IsTrue(calls);
    Py_DECREF(calls);
    Py_DECREF(hook);
    if (truth != 0) {
      if (truth < 0) PyErr_Clear();
      return true;
    }
  }
  return false;
}

// route(gating_output, topk, scoring_func, correction_bias, num_expert_group, topk_group, renormalize,
//       routed_scaling_factor, out) -> (weights, ids), or None when declined.
PyObject* route(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  Args a;
  Call c;
  const Verdict verdict = accept(args, nargs, true, &a, &c);
  if (verdict != kAccepted) return not_accepted(verdict);
  const at::Tensor& logits = THPVariable_Unpack(a.logits);
  if (c.tokens == 0 || !logits.is_cuda()) Py_RETURN_NONE;
  Entry* e = find(make_key(c, logits, a.bias, a.out));
  if (!e) Py_RETURN_NONE;

  const int64_t device = logits.device().index();
  PyObject* current = PyObject_CallNoArgs(config.current_device);
  if (!current) return nullptr;
  const long current_index = PyLong_AsLong(current);
  Py_DECREF(current);
  if (current_index == -1 && PyErr_Occurred()) return nullptr;
  if (current_index != device || hooks_installed()) Py_RETURN_NONE;

  at::Tensor weights, ids;
  if (a.out == Py_None) {
    auto options = logits.options();
    weights = at::empty({c.tokens, c.topk}, options.dtype(at::kFloat));
    ids = at::empty({c.tokens, c.topk}, options.dtype(at::kInt));
  } else {
    weights = THPVariable_Unpack(PySequence_Fast_GET_ITEM(a.out, 0));
    ids = THPVariable_Unpack(PySequence_Fast_GET_ITEM(a.out, 1));
  }
  const int64_t ints[] = {logits.stride(0), weights.stride(0), weights.stride(1), ids.stride(0), ids.stride(1),
                          c.tokens};
  for (int64_t v : ints) {
    if (!fits_int32(v)) Py_RETURN_NONE;  // a binary compiled for 32-bit arguments
  }

  PyObject* device_obj = PyLong_FromLongLong(device);
  if (!device_obj) return nullptr;
  PyObject* stream_obj = PyObject_CallOneArg(config.raw_stream, device_obj);
  Py_DECREF(device_obj);
  if (!stream_obj) return nullptr;
  CUstream stream = PyLong_AsVoidPtr(stream_obj);
  Py_DECREF(stream_obj);
  if (PyErr_Occurred()) return nullptr;

  union Slot {
    uint64_t ptr;
    int32_t i32;
    float f32;
  } slots[kMaxParams + 2];
  void* params[kMaxParams + 2];
  const at::Tensor* bias = a.bias == Py_None ? nullptr : &THPVariable_Unpack(a.bias);
  for (int i = 0; i < e->n_params; ++i) {
    Slot& s = slots[i];
    switch (e->params[i]) {
      case kLogitsPtr: s.ptr = reinterpret_cast<uintptr_t>(logits.data_ptr()); break;
      case kBiasPtr: s.ptr = bias ? reinterpret_cast<uintptr_t>(bias->data_ptr()) : 0; break;
      case kStrideLogitsRow: s.i32 = static_cast<int32_t>(logits.stride(0)); break;
      case kWeightsPtr: s.ptr = reinterpret_cast<uintptr_t>(weights.data_ptr()); break;
      case kIdsPtr: s.ptr = reinterpret_cast<uintptr_t>(ids.data_ptr()); break;
      case kStrideWeightsRow: s.i32 = static_cast<int32_t>(weights.stride(0)); break;
      case kStrideWeightsCol: s.i32 = static_cast<int32_t>(weights.stride(1)); break;
      case kStrideIdsRow: s.i32 = static_cast<int32_t>(ids.stride(0)); break;
      case kStrideIdsCol: s.i32 = static_cast<int32_t>(ids.stride(1)); break;
      case kNumRows: s.i32 = static_cast<int32_t>(c.tokens); break;
      case kScale: s.f32 = static_cast<float>(c.scale); break;
    }
    params[i] = &s;
  }
  for (int i = e->n_params; i < e->n_params + 2; ++i) {  // Triton's global and profile scratch: none
    slots[i].ptr = 0;
    params[i] = &slots[i];
  }
  const int64_t grid = (c.tokens + e->rows_per_program - 1) / e->rows_per_program;
  CUresult status;
  if (e->pdl) {
    static LaunchAttribute attribute = [] {  // the same for every launch: built once
      LaunchAttribute a;
      std::memset(&a, 0, sizeof(a));
      a.id = kProgrammaticStreamSerialization;
      a.value.programmatic_stream_serialization_allowed = 1;
      return a;
    }();
    const LaunchConfig launch_config = {static_cast<unsigned>(grid), 1, 1, e->threads, 1, 1, e->shared, stream,
                                        &attribute, 1};
    status = cu_launch_kernel_ex(&launch_config, e->function, params, nullptr);
  } else {
    status = cu_launch_kernel(e->function, static_cast<unsigned>(grid), 1, 1, e->threads, 1, 1, e->shared, stream,
                              params, nullptr);
  }
  if (status != 0) {
    const char* text = "unknown error";
    if (cu_get_error_string) cu_get_error_string(status, &text);
    PyErr_Format(PyExc_RuntimeError, "moe_routing: kernel launch failed (%d): %s", status, text);
    return nullptr;
  }
  ++launch_count;
  PyObject* w = THPVariable_Wrap(weights);
  if (!w) return nullptr;
  PyObject* i = THPVariable_Wrap(ids);
  if (!i) {
    Py_DECREF(w);
    return nullptr;
  }
  PyObject* result = PyTuple_Pack(2, w, i);
  Py_DECREF(w);
  Py_DECREF(i);
  return result;
  END_HANDLE_TH_ERRORS
}

PyObject* call_tuple(const Call& c) {
  return Py_BuildValue("(LLLOLLOd)", (long long)c.tokens, (long long)c.experts, (long long)c.topk,
                       c.softmax ? Py_True : Py_False, (long long)c.groups, (long long)c.kept,
                       c.renormalize ? Py_True : Py_False, c.scale);
}

PyObject* key_tuple(const Key& k) {
  return Py_BuildValue("(LLLLLLLLLLLLLL)", (long long)k.experts, (long long)k.topk, (long long)k.softmax,
                       (long long)k.groups, (long long)k.kept, (long long)k.renormalize, (long long)k.token_class,
                       (long long)k.logits_dtype, (long long)k.bias_dtype, (long long)k.device,
                       (long long)k.logits_aligned, (long long)k.bias_aligned, (long long)k.stride_class,
                       (long long)k.dense_out);
}

// check(9 args) -> the normalised call as call.RoutingCall's fields, or None when declined (tests).
PyObject* check(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  Args a;
  Call c;
  const Verdict verdict = accept(args, nargs, false, &a, &c);
  return verdict == kAccepted ? call_tuple(c) : not_accepted(verdict);
  END_HANDLE_TH_ERRORS
}

// key(9 args) -> the launcher cache's key of an accepted call with a plain layout, or None (tests; any device).
PyObject* key(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  Args a;
  Call c;
  const Verdict verdict = accept(args, nargs, true, &a, &c);
  return verdict == kAccepted ? key_tuple(make_key(c, THPVariable_Unpack(a.logits), a.bias, a.out))
                               : not_accepted(verdict);
  END_HANDLE_TH_ERRORS
}

// register(9 args, function, num_warps, shared, rows_per_program, params, pdl) -> the key registered, or None.
// Called by the Python path after it launched this call's kernel through Triton; `params` are the
// kernel's runtime arguments in order (Param codes), without Triton's two trailing scratch pointers; `pdl`:
// the kernel is launched with programmatic dependent launch (declined where the driver lacks cuLaunchKernelEx).
PyObject* register_kernel(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (nargs != 15) {
    PyErr_Format(PyExc_TypeError, "register expects 15 arguments, got %zd", nargs);
    return nullptr;
  }
  Args a;
  Call c;
  const Verdict verdict = accept(args, 9, true, &a, &c);
  if (verdict != kAccepted) return not_accepted(verdict);
  const at::Tensor& logits = THPVariable_Unpack(a.logits);
  Entry e;
  std::memset(&e, 0, sizeof(Entry));
  e.key = make_key(c, logits, a.bias, a.out);
  e.function = PyLong_AsVoidPtr(args[9]);
  const long long warps = PyLong_AsLongLong(args[10]);
  const long long shared = PyLong_AsLongLong(args[11]);
  e.rows_per_program = PyLong_AsLongLong(args[12]);
  const int pdl = PyObject_IsTrue(args[14]);
  if (PyErr_Occurred() || pdl < 0) return nullptr;
  if (pdl && !cu_launch_kernel_ex) Py_RETURN_NONE;
  e.pdl = pdl != 0;
  if (warps < 1 || warps > 32 || shared < 0 || e.rows_per_program < 1) {
    PyErr_SetString(PyExc_ValueError, "register: num_warps, shared or rows_per_program out of range");
    return nullptr;
  }
  e.threads = static_cast<unsigned>(32 * warps);
  e.shared = static_cast<unsigned>(shared);
  PyObject* params = PySequence_Fast(args[13], "register: params must be a sequence");
  if (!params) return nullptr;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(params);
  if (n > kMaxParams) {
    Py_DECREF(params);
    PyErr_SetString(PyExc_ValueError, "register: too many params");
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    const long code = PyLong_AsLong(PySequence_Fast_GET_ITEM(params, i));
    if (code < 0 || code >= kParamKinds) {
      Py_DECREF(params);
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "register: unknown param code");
      return nullptr;
    }
    e.params[i] = static_cast<int8_t>(code);
  }
  Py_DECREF(params);
  e.n_params = static_cast<int>(n);
  Entry* existing = find(e.key);
  if (existing) {
    *existing = e;
  } else {
    entries.push_back(e);
  }
  return key_tuple(e.key);
  END_HANDLE_TH_ERRORS
}

// configure(max_experts, max_topk, max_groups, class_starts, raw_stream, current_device, runtime_knobs)
PyObject* configure(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 7) {
    PyErr_Format(PyExc_TypeError, "configure expects 7 arguments, got %zd", nargs);
    return nullptr;
  }
  config.max_experts = PyLong_AsLongLong(args[0]);
  config.max_topk = PyLong_AsLongLong(args[1]);
  config.max_groups = PyLong_AsLongLong(args[2]);
  if (PyErr_Occurred()) return nullptr;
  PyObject* starts = PySequence_Fast(args[3], "configure: class_starts must be a sequence");
  if (!starts) return nullptr;
  config.class_starts.clear();
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(starts); ++i) {
    config.class_starts.push_back(PyLong_AsLongLong(PySequence_Fast_GET_ITEM(starts, i)));
  }
  Py_DECREF(starts);
  if (PyErr_Occurred()) return nullptr;
  PyObject** slots[3] = {&config.raw_stream, &config.current_device, &config.runtime_knobs};
  for (int i = 0; i < 3; ++i) {
    Py_XDECREF(*slots[i]);
    *slots[i] = args[4 + i];
    Py_INCREF(args[4 + i]);
  }
  if (!config.enter_name) {
    config.enter_name = PyUnicode_InternFromString("launch_enter_hook");
    config.exit_name = PyUnicode_InternFromString("launch_exit_hook");
    config.calls_name = PyUnicode_InternFromString("calls");
  }
  entries.clear();
  config.ready = true;
  Py_RETURN_NONE;
}

// open_driver() -> whether libcuda's cuLaunchKernel was found (False on machines without a driver).
PyObject* open_driver(PyObject*, PyObject*) {
  if (!cu_launch_kernel) {
    void* handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (handle) {
      cu_launch_kernel = reinterpret_cast<LaunchKernelFn>(dlsym(handle, "cuLaunchKernel"));
      cu_get_error_string = reinterpret_cast<GetErrorStringFn>(dlsym(handle, "cuGetErrorString"));
      cu_launch_kernel_ex = reinterpret_cast<LaunchKernelExFn>(dlsym(handle, "cuLaunchKernelEx"));
    }
  }
  return PyBool_FromLong(cu_launch_kernel != nullptr);
}

PyObject* clear(PyObject*, PyObject*) {
  entries.clear();
  Py_RETURN_NONE;
}

PyObject* size(PyObject*, PyObject*) { return PyLong_FromSize_t(entries.size()); }

PyObject* launches(PyObject*, PyObject*) { return PyLong_FromUnsignedLongLong(launch_count); }

PyMethodDef methods[] = {
    {"route", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(route)), METH_FASTCALL,
     "route(9 arguments of moe_routing.route) -> (weights, ids), or None where the Python path must run"},
    {"check", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(check)), METH_FASTCALL,
     "check(9 arguments) -> the normalised call, or None (declined)"},
    {"key", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(key)), METH_FASTCALL,
     "key(9 arguments) -> the launcher cache's key, or None (declined)"},
    {"register", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(register_kernel)), METH_FASTCALL,
     "register(9 arguments, function, num_warps, shared, rows_per_program, params, pdl) -> key or None"},
    {"configure", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(configure)), METH_FASTCALL,
     "configure(max_experts, max_topk, max_groups, class_starts, raw_stream, current_device, runtime_knobs)"},
    {"open_driver", open_driver, METH_NOARGS, "open_driver() -> whether cuLaunchKernel was found"},
    {"clear", clear, METH_NOARGS, "forget every registered kernel"},
    {"size", size, METH_NOARGS, "the number of registered kernels"},
    {"launches", launches, METH_NOARGS, "the number of launches made by route() here"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "moe_routing_host_launch", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_moe_routing_host_launch() { return PyModule_Create(&module_def); }
