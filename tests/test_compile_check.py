"""The build check's pieces: ROCm plans, Triton's keys for a named target, the register read-outs (AMD assembly,
ptxas's report), one real gfx942 and one real sm_90 compile (in a process without Triton's interpreter). CI runs
the whole check for both vendors: ``moe-routing compile-check`` and ``moe-routing compile-check --target sm_90``."""

import os
import types

import pytest
import torch

from conftest import printed_without_interpreter
from moe_routing.call import check_call
from moe_routing.kernels import targets
from moe_routing.kernels.rules import CLASS_NAMES, all_plans, choose_plan
from moe_routing.measure import compile_check
from moe_routing.precompile import MODEL_SHAPES, shape_launches

GROUPED = [(256, 8, 8, 4), (160, 6, 8, 3), (96, 3, 32, 2)]


@pytest.mark.parametrize("experts, topk, groups, kept", GROUPED)
def test_rocm_plans_take_no_register_cap_no_pdl_and_two_passes_for_groups(experts, topk, groups, kept):
    logits = torch.empty(1, experts, dtype=torch.bfloat16)
    call = check_call(logits, topk, "sigmoid", torch.empty(experts), groups, kept, True, 1.0, None)
    for name, plan in all_plans(call, wide_loads=True, biased=True, rocm=True).items():
        if "two passes" in name:
            continue
        assert plan.maxnreg is None and not plan.constexprs.get("GRID_WAIT"), name
        assert not plan.constexprs.get("ONE_PASS") and not plan.constexprs.get("WORDS"), name
    nvidia = [choose_plan(call, tclass, True, True) for tclass in range(len(CLASS_NAMES))]
    assert any(plan.constexprs.get("ONE_PASS") for plan in nvidia) or experts != 256  # the rule differs there


def test_flat_rocm_plans_are_the_nvidia_plans_but_the_register_cap():
    logits = torch.empty(1, 384, dtype=torch.bfloat16)
    call = check_call(logits, 8, "sigmoid", torch.empty(384), 1, 1, True, 1.0, None)
    for tclass in range(len(CLASS_NAMES)):
        assert choose_plan(call, tclass, True, True, rocm=True) == choose_plan(call, tclass, True, True,
                                                                                 rocm=False)._replace(maxnreg=None)


def test_cache_key_tells_launches_apart_as_triton_does():
    shape = MODEL_SHAPES["kimi-k2"]
    aligned = shape_launches(shape, torch.bfloat16, "cpu")[0]
    same = shape_launches(shape, torch.bfloat16, "cpu")[0]
    unaligned = shape_launches(shape, torch.bfloat16, "cpu", unaligned=True)[0]
    wide_ids = shape_launches(shape, torch.bfloat16, "cpu", ids_dtype=torch.int64)[0]
    target = targets.TARGETS["sm_90"]

    def key(launch):
        args, kwargs = launch.arguments()
        return targets.cache_key(launch.plan.kernel, target, args, kwargs)

    assert key(aligned) == key(same)
    assert len({key(aligned), key(unaligned), key(wide_ids)}) == 3


def test_amd_resources_reads_the_assembly_and_refuses_an_unknown_format():
    text = ("\t.vgpr_count: 96\n\t.sgpr_count: 104\n\t.vgpr_spill_count: 0\n\t.sgpr_spill_count: 5\n"
            "; ScratchSize: 0\n")
    found = targets.amd_resources(types.SimpleNamespace(asm={"amdgcn": text}))
    assert found == {"vgpr_spill_count": 0, "sgpr_spill_count": 5, "scratch_bytes": 0, "vgprs": 96, "sgprs": 104}
    with pytest.raises(ValueError, match="no vgpr_spill_count"):
        targets.amd_resources(types.SimpleNamespace(asm={"amdgcn": "; nothing"}))


def test_ptxas_counts_reads_the_report_and_refuses_an_unknown_format():
    text = ("ptxas info    : Function properties for bitonic_kernel\n"
            "    8 bytes stack frame, 12 bytes spill stores, 4 bytes spill loads\n"
            "ptxas info    : Used 70 registers, used 1 barriers, 8 bytes cumulative stack size\n")
    assert targets.ptxas_counts(text) == {"registers": 70, "spill_stores": 12, "spill_loads": 4, "stack_bytes": 8}
    with pytest.raises(ValueError, match="no spill_stores"):
        targets.ptxas_counts("ptxas info    : Used 70 registers\n")


def test_failures_are_compile_errors_and_amd_spills():
    rows = [dict(target="gfx942", ok="yes"), dict(target="gfx942", ok="SPILLS"), dict(target="gfx950", ok="ERROR"),
            dict(target="sm_90", ok="yes"), dict(target="sm_90", ok="SPILLS"), dict(target="sm_90", ok="ERROR")]
    assert compile_check.failures(rows) == [rows[1], rows[2], rows[5]]


def test_compile_check_refuses_unknown_or_mixed_targets_unknown_models_and_the_interpreter():
    with pytest.raises(ValueError, match="not targets this check knows"):
        compile_check.run_compile_check(targets=("sm_80",))
    with pytest.raises(ValueError, match="separate runs"):
        compile_check.run_compile_check(targets=("sm_90", "gfx942"))
    with pytest.raises(ValueError, match="models: unknown"):
        compile_check.run_compile_check(models=("llama",))
    for layouts in ((), ("padded",)):
        with pytest.raises(ValueError, match="layouts: expected a choice of aligned, unaligned"):
            compile_check.run_compile_check(layouts=layouts)
    if os.environ.get("TRITON_INTERPRET") == "1":
        with pytest.raises(RuntimeError, match="without TRITON_INTERPRET"):
            compile_check.run_compile_check(models=("mixtral",))


def test_one_plan_compiles_for_gfx942_without_spills(tmp_path):
    """A real compile for MI300X on this machine through the whole check (its jobs, the distinct kernels, the
    worker pool, the AMD read-out): its launches cut to Moonlight's single-token plan on aligned logits, a few
    seconds (CI's ``moe-routing compile-check`` compiles every plan)."""
    program = (
        "import torch\n"
        "from moe_routing.measure import compile_check\n"
        "every = compile_check.shape_launches\n"
        "compile_check.shape_launches = lambda *a, **k: [] if k.get('unaligned') else every(*a, **k)[:1]\n"
        "rows = compile_check.run_compile_check(('gfx942',), ('moonlight',), (torch.bfloat16,), 2, plans=False)\n"
        "assert [(r['tokens'], r['layout']) for r in rows] == [('>= 1', 'aligned')], rows\n"
        "print(rows[0]['ok'], rows[0]['vgprs'], rows[0]['vgpr spills'])\n")
    ok, vgprs, spills = printed_without_interpreter(program, tmp_path)
    assert ok == "yes" and int(vgprs) > 0 and spills == "0"


def test_one_plan_compiles_for_sm_90_with_pdl_and_without_spills(tmp_path):
    """A real compile for H100 / H200 on this machine (DeepSeek-V4's single-token sqrt-softplus plan, launched with
    programmatic dependent launch as on Hopper: its griddepcontrol.wait is in the PTX)."""
    program = (
        "import torch\n"
        "from moe_routing.measure import compile_check\n"
        "from moe_routing.kernels import targets\n"
        "launch = [j for j in compile_check._jobs(('deepseek-v4',), (torch.float32,), rocm=False)][0][3]\n"
        "args, kwargs = launch.arguments()\n"
        "compiled = targets.compile_plan(launch.plan.kernel, targets.TARGETS['sm_90'], args, kwargs)\n"
        "row = compile_check._nvidia_row(compiled)\n"
        "print(row['ok'], row['registers'], row['spill stores'], 'griddepcontrol.wait' in compiled.asm['ptx'])\n")
    ok, registers, spills, waits = printed_without_interpreter(program, tmp_path)
    assert ok == "yes" and int(registers) > 0 and spills == "0" and waits == "True"


def test_plan_kernel_launches_cover_every_compile_time_choice():
    """compile-check builds the dispatch-plan kernel as align/group launch it: both layouts, every slot class of
    the one-launch path and both launches of the chunked path at every chunk class, int32 and int64 ids, and every
    runtime role of a map and of the scatter index (which share binaries); each launch once."""
    from moe_routing.kernels._plan import BLOCKS, COUNT, GROUPED, PER_BIN, PLACE_CHUNK
    from moe_routing.kernels.plan_launch import CHUNK_CLASSES, SLOT_CLASSES

    for ids_dtype in (torch.int32, torch.int64):
        launches = compile_check.plan_kernel_launches(256, 8, ids_dtype)
        chosen = {(launch.plan.constexprs["STAGE"], launch.plan.constexprs["LAYOUT"], launch.plan.constexprs["SLOTS"])
                  for launch in launches}
        # (the one-launch path's layout is a runtime argument: its binaries carry LAYOUT=BLOCKS for both)
        assert chosen == ({(PER_BIN, BLOCKS, slots) for slots in SLOT_CLASSES}
                          | {(PLACE_CHUNK, layout, slots) for layout in (BLOCKS, GROUPED) for slots in CHUNK_CLASSES}
                          | {(COUNT, BLOCKS, slots) for slots in CHUNK_CLASSES})
        roles = {(launch.arguments()[0][-1], launch.arguments()[0][-3], launch.arguments()[0][-2])
                 for launch in launches if launch.plan.constexprs["STAGE"] != COUNT}  # (layout, map_mode, scatter)
        assert all(launch.arguments()[0][-1] == launch.plan.constexprs["LAYOUT"] for launch in launches
                   if launch.plan.constexprs["STAGE"] == PLACE_CHUNK)
        assert roles == {(BLOCKS, 0, 0), (BLOCKS, 0, 1), (BLOCKS, 1, 1), (BLOCKS, 2, 0), (GROUPED, 0, 0),
                         (GROUPED, 1, 0)}
        keys = [(tuple(sorted(launch.plan.constexprs.items())), launch.plan.num_warps, launch.arguments()[0][1].dtype,
                 *launch.arguments()[0][-3:]) for launch in launches]
        assert len(set(keys)) == len(keys)  # each launch once
        args, kwargs = launches[0].arguments()
        assert args[0].dtype == ids_dtype and kwargs["num_warps"] > 0
        assert not any(launch.plan.constexprs["GRID_WAIT"] or "launch_pdl" in launch.arguments()[1]
                       for launch in launches)  # AMD: no programmatic launch
        nvidia = compile_check.plan_kernel_launches(256, 8, ids_dtype, rocm=False)
        assert len(nvidia) == len(launches)  # as launched on Hopper: each launch programmatic
        assert all(launch.plan.constexprs["GRID_WAIT"] and launch.arguments()[1]["launch_pdl"] for launch in nvidia)
    jobs = compile_check._jobs(("moonlight",), (torch.bfloat16,), rocm=True)
    assert any(layout == "plan" for _, _, layout, _ in jobs)
    assert {layout for _, _, layout, _ in jobs} == {"aligned", "unaligned", "plan", "route plan"}
    aligned = compile_check._jobs(("moonlight",), (torch.bfloat16,), rocm=True, layouts=("aligned",))
    assert {layout for _, _, layout, _ in aligned} == {"aligned", "plan", "route plan"}
    assert not any(layout in ("plan", "route plan") for _, _, layout, _ in compile_check._jobs(
        ("moonlight",), (torch.bfloat16,), rocm=True, plans=False))


@pytest.mark.parametrize("rocm", [True, False])
def test_route_plan_launches_cover_every_one_launch_tile(rocm):
    """compile-check builds each one-launch route_plan kernel once per tile its launches can take: the one-program
    kernel at one token, and the grid kernel where the shape's rule gives it token counts (not Moonlight's 64 nor
    Qwen3's 128 experts), with the slots a program's rows hold, each logits dtype given, programmatic on NVIDIA."""
    from moe_routing.kernels.route_plan_launch import grid_tile, one_program_tile
    from moe_routing.plan_call import ONE_LAUNCH_TOKENS

    for model, grid_kernel in (("deepseek-v3", True), ("moonlight", False), ("qwen3-moe", False), ("kimi-k2", True)):
        jobs = [job for job in compile_check._jobs((model,), (torch.bfloat16, torch.float32), rocm=rocm,
                                                   layouts=("aligned",)) if job[2] == "route plan"]
        shape = compile_check.resolve_shapes(model)[0]
        for dtype in ("bfloat16", "float32"):
            launches = [launch for _, job_dtype, _, launch in jobs if job_dtype == dtype]
            rule = compile_check.shape_launches(shape, getattr(torch, dtype), "cpu", rocm=rocm, token_counts=(1,))[0]
            grids = [grid_tile(rule.plan, tokens) for tokens in range(2, ONE_LAUNCH_TOKENS + 1)]
            assert one_program_tile(rule.plan, 1) is not None and any(grids) == grid_kernel
            assert [launch.plan.name for launch in launches] == ["route plan"] + ["route plan grid"] * grid_kernel
            for launch in launches:
                args, kwargs = launch.arguments()
                assert args[0].dtype == getattr(torch, dtype) and kwargs["ROWS"] == launch.plan.rows == 1
                assert kwargs["BINS"] > shape.experts
                if launch.plan.name == "route plan grid":
                    assert kwargs["OWN"] >= shape.topk and kwargs["PARTS"] == 3 and len(args) == 27
                    assert launch.call.tokens == min(t for t, tile in enumerate(grids, 2) if tile is not None)
                else:
                    assert kwargs["SLOTS"] >= shape.topk and len(args) == 25 and launch.call.tokens == 1
                assert kwargs["GRID_WAIT"] == (not rocm) and ("launch_pdl" in kwargs) == (not rocm)


def test_compile_check_command_refuses_bad_layouts_and_dtypes():
    from click.testing import CliRunner

    from moe_routing.cli import main

    for option, value, expected in (("--layouts", "aligned,padded", "expected a comma-separated choice of aligned, "
                                     "unaligned"), ("--dtypes", "bf8", "expected a comma-separated choice of")):
        result = CliRunner().invoke(main, ["compile-check", option, value])
        assert result.exit_code == 2 and expected in result.output, result.output


@pytest.mark.parametrize("rocm", [True, False])
def test_float16_logits_take_bfloat16s_plans(rocm):
    """CI compiles bf16's plans for 16-bit logits (.ci/run): the rules choose the same plan for fp16 at every token
    class of every checked model, aligned or not, on both vendors, so fp16's binaries differ from bf16's only in
    the conversion of the loaded half-words to float32."""
    from moe_routing.precompile import resolve_shapes

    for model in compile_check.DEFAULT_MODELS:
        shape = resolve_shapes(model)[0]
        for unaligned in (False, True):
            plans = [[(launch.call.tokens, launch.plan) for launch in
                      shape_launches(shape, dtype, "cpu", unaligned=unaligned, rocm=rocm)]
                     for dtype in (torch.bfloat16, torch.float16)]
            assert plans[0] == plans[1] and len(plans[0]) >= 3, (model, unaligned)


def test_the_ids_dtypes_of_the_plan_launches_are_a_choice():
    """``--ids-dtypes``: the plan kernel's launches for the ids' dtypes asked for (CI: int32), and a clear error
    for any other dtype."""
    jobs = compile_check._jobs(("moonlight",), (torch.bfloat16,), rocm=True, ids_dtypes=(torch.int32,))
    assert {dtype for _, dtype, layout, _ in jobs if layout == "plan"} == {"ids int32"}
    both = compile_check._jobs(("moonlight",), (torch.bfloat16,), rocm=True)
    assert {dtype for _, dtype, layout, _ in both if layout == "plan"} == {"ids int32", "ids int64"}
    with pytest.raises(ValueError, match="ids_dtypes"):
        compile_check.run_compile_check(("gfx942",), ("moonlight",), (torch.bfloat16,), ids_dtypes=(torch.int16,))
