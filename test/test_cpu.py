"""CPU topology, pinning and the suffix backend: NUMA nodes from sysfs, disjoint core sets, memory binding."""

import os
import time
import threading

import pytest
import torch

from hybrid_vla_ros.engine.cpu import (allowed_cores, bind_memory_to_node, cores_of_numa_node, cpu_backend_report,
                                       cpu_isa, numa_nodes, parse_cpulist, split_cores)
from hybrid_vla_ros.errors import ConfigError


def test_cpulist_parsing():
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("") == []


def test_numa_nodes_come_from_sysfs_and_keep_only_allowed_cores(tmp_path):
    allowed = allowed_cores()
    for node, cores in ((0, allowed[:1]), (1, allowed[1:])):
        (tmp_path / f"node{node}").mkdir()
        (tmp_path / f"node{node}" / "cpulist").write_text(",".join(map(str, cores + [4095])))
    nodes = numa_nodes(tmp_path)
    assert nodes[0] == allowed[:1] and nodes.get(1, []) == allowed[1:]
    with pytest.raises(ConfigError, match="NUMA node 7 not found"):
        cores_of_numa_node(7, tmp_path)


def test_machine_without_numa_sysfs_is_one_node(tmp_path):
    assert numa_nodes(tmp_path / "missing") == {0: allowed_cores()}


def test_core_sets_are_disjoint_and_refused_when_too_few():
    assert split_cores([0, 1, 2, 3, 4], 2) == [[0, 1, 2], [3, 4]]
    with pytest.raises(ConfigError, match="only 1 cores allowed"):
        split_cores([0], 2)


def test_memory_binding_to_this_machines_node_succeeds_on_linux():
    result = {}
    thread = threading.Thread(target=lambda: result.update(status=bind_memory_to_node(min(numa_nodes()))))
    thread.start()
    thread.join()
    assert result["status"] == "bound" or result["status"].startswith("not bound:")
    if os.uname().sysname == "Linux" and os.uname().machine in ("x86_64", "aarch64"):
        assert result["status"] == "bound"


def test_backend_report_says_what_the_suffix_runs_on():
    """Stock PyTorch + oneDNN (IPEX is end-of-life: no path tries it), the ISA, whether bf16 is native."""
    report = cpu_backend_report(torch.bfloat16)
    assert report["dtype"] == "bfloat16" and report["backend"].startswith(f"stock torch {torch.__version__}")
    assert "ipex" not in report and "ipex" not in report["backend"].lower()
    assert report["bf16_native"] == (report["isa"] in ("amx_bf16", "avx512_bf16"))


def test_the_isa_is_the_best_the_flags_offer():
    assert cpu_isa({"avx2", "avx512f", "avx512_bf16", "amx_bf16"}) == "amx_bf16"
    assert cpu_isa({"avx2", "avx512f", "avx512_bf16"}) == "avx512_bf16"
    assert cpu_isa({"avx2", "avx512f"}) == "avx512f" and cpu_isa({"sse4_2"}) == "generic"


def test_onednn_isa_cap_hides_the_flags_above_it(monkeypatch, tmp_path):
    """ONEDNN_MAX_CPU_ISA caps what oneDNN's kernels use: the choices made from the flags (bf16 native, the int8
    flavour) must see the capped CPU, not /proc/cpuinfo's."""
    from hybrid_vla_ros.engine import cpu
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor : 0\nflags : fpu sse4_2 avx avx2 fma avx_vnni avx512f avx512bw avx512_vnni "
                       "avx512_bf16 amx_bf16 amx_int8 amx_tile aes\n")
    real_path = cpu.Path
    monkeypatch.setattr(cpu, "Path", lambda p: cpuinfo if p == "/proc/cpuinfo" else real_path(p))
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    assert cpu_isa(cpu.cpu_flags()) == "amx_bf16"
    for cap, isa, kept in [("AVX2", "avx2", {"avx", "avx2", "fma"}), ("avx512_core", "avx512f", {"avx512bw"}),
                           ("AVX512_CORE_BF16", "avx512_bf16", {"avx512_vnni", "avx512_bf16"})]:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
        flags = cpu.cpu_flags()
        assert cpu_isa(flags) == isa and kept <= flags and {"fpu", "sse4_2", "aes"} <= flags, (cap, flags)
        assert not {"amx_bf16", "amx_int8", "amx_tile"} & flags
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "ALL")
    assert "amx_int8" in cpu.cpu_flags()


def test_a_pinned_worker_never_runs_more_torch_threads_than_its_cores():
    from hybrid_vla_ros.engine.cpu import pin_current_thread
    seen = {}

    def worker():
        os.sched_setaffinity(0, {allowed_cores()[0]})  # e.g. a process pinned by --pin
        pin_current_thread(None)                        # no explicit cores: still one thread per allowed core
        seen["unset"] = torch.get_num_threads()
        pin_current_thread(allowed_cores()[:1], threads=None)
        seen["pinned"] = torch.get_num_threads()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == {"unset": 1, "pinned": 1}


def test_each_stage_runs_the_thread_count_it_set_even_when_the_other_sets_another_later():
    """Uneven split (1 thread vs 2): torch applies the process-wide last value at a thread's first op, so a
    stage that set 1 ran 2 once the other stage had set 2. Each worker checks what it actually runs."""
    from hybrid_vla_ros.engine.cpu import pin_current_thread
    one_set, two_set = threading.Event(), threading.Event()
    seen = {}

    def stage_one():
        pin_current_thread(None, threads=1)
        one_set.set()
        two_set.wait(5)
        torch.ones(1 << 17).add_(1)  # a parallel op after the other stage set its count
        seen["one"] = torch.get_num_threads()

    def stage_two():
        one_set.wait(5)
        pin_current_thread(None, threads=2)
        two_set.set()
        seen["two"] = torch.get_num_threads()

    threads = [threading.Thread(target=stage_one), threading.Thread(target=stage_two)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"one": 1, "two": 2}


def test_separate_processes_get_the_parents_resolved_core_split(tmp_path, monkeypatch):
    import subprocess
    from hybrid_vla_ros.ros.launch_support import bringup
    launched = []
    monkeypatch.setattr(subprocess, "Popen", lambda cmd, env=None: launched.append(cmd))
    bringup.spawn_processes(None)
    by_node = {cmd[cmd.index("--node") + 1]: cmd for cmd in launched}
    config = by_node["hybrid_vla_suffix"][by_node["hybrid_vla_suffix"].index("--config") + 1]
    assert all(cmd[cmd.index("--config") + 1] == config for cmd in launched)
    resolved = bringup.graph_params(config)
    if len(allowed_cores()) >= 2:
        prefix, suffix = resolved["hybrid_vla_prefix"]["cores"], resolved["hybrid_vla_suffix"]["cores"]
        assert prefix and suffix and not set(prefix) & set(suffix)
        assert by_node["hybrid_vla_suffix"][-2:] == ["--pin", ",".join(map(str, suffix))]


def test_pinned_gives_the_thread_back_its_own_cores_and_threads():
    """Profiling pins the calling thread; afterwards it must run on every core it had (a bench once left its
    main thread on the suffix's cores, and the processes it started could not pin to the prefix's)."""
    from hybrid_vla_ros.engine.cpu import pinned
    seen = {}

    def worker():
        before = (os.sched_getaffinity(0), torch.get_num_threads())
        with pinned(allowed_cores()[-1:], threads=1):
            seen["inside"] = (os.sched_getaffinity(0), torch.get_num_threads())
        seen["after"], seen["before"] = (os.sched_getaffinity(0), torch.get_num_threads()), before

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen["inside"] == ({allowed_cores()[-1]}, 1)
    assert seen["after"] == seen["before"]


# ---- dtype: auto ----------------------------------------------------------------------------------------

def test_auto_dtype_is_fp32_without_native_bf16_and_does_not_probe():
    """This machine's CPU may have AMX; a CPU with only AVX2 is given as its flags (the probe must not run)."""
    from hybrid_vla_ros.engine.dtype_choice import choose_suffix_dtype

    def must_not_run(*_):
        raise AssertionError("probed without native bf16")
    choice = choose_suffix_dtype(576, 1536, flags={"avx2", "fma"}, timer=must_not_run)
    assert choice.dtype == "fp32" and "no native bf16" in choice.reason


@pytest.mark.parametrize("bf16_ms,expected", [(0.4, "bf16"), (0.95, "fp32"), (1.5, "fp32")])
def test_auto_dtype_takes_bf16_only_when_the_probe_measures_it_clearly_faster(bf16_ms, expected):
    from hybrid_vla_ros.engine.dtype_choice import choose_suffix_dtype
    timings = {torch.float32: 1.0, torch.bfloat16: bf16_ms}
    choice = choose_suffix_dtype(576, 1536, flags={"avx512_bf16"}, timer=lambda dtype, *_: timings[dtype])
    assert (choice.dtype, choice.fp32_ms, choice.bf16_ms) == (expected, 1.0, bf16_ms)
    assert f"bf16 {bf16_ms:.2f} ms vs fp32 1.00 ms -> {expected}" in choice.reason


def test_auto_dtype_probe_on_this_cpu_is_short_and_consistent_with_its_timings():
    import time
    from hybrid_vla_ros.engine.cpu import cpu_flags
    from hybrid_vla_ros.engine.dtype_choice import BF16_MUST_BE_FASTER, choose_suffix_dtype
    t0 = time.perf_counter()
    choice = choose_suffix_dtype(576, 1536, cores=sorted(os.sched_getaffinity(0))[-1:])
    assert time.perf_counter() - t0 < 5.0
    if {"amx_bf16", "avx512_bf16"} & cpu_flags():
        assert choice.dtype == ("bf16" if choice.bf16_ms < BF16_MUST_BE_FASTER * choice.fp32_ms else "fp32")
    else:
        assert choice.dtype == "fp32" and choice.bf16_ms is None


def test_thread_cpu_seconds_names_this_process_threads_and_counts_their_work():
    import threading
    from hybrid_vla_ros.engine.cpu import thread_cpu_delta, thread_cpu_seconds

    def busy():
        end = time.thread_time() + 0.5
        while time.thread_time() < end:
            sum(range(1000))
    before = thread_cpu_seconds()
    worker = threading.Thread(target=busy, name="hvla-test-busy")
    worker.start()
    time.sleep(0.25)
    during = thread_cpu_seconds()
    worker.join()
    assert "MainThread" in before and "hvla-test-busy" in during
    assert thread_cpu_delta(before, during)["hvla-test-busy"] > 0.02   # ~0.25 s of it busy, 10 ms ticks
