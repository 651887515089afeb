"""bench --gil's sampler (bench/gil.py): each thread's GIL-held share of a span, read by py-spy from outside
the process. A pure-Python loop holds the GIL; a sleeping thread and a thread in torch's GEMMs (which release
it) hardly do. py-spy comes with requirements.txt: without it these tests fail with the sampler's reason."""

import threading
import time

import torch

from hybrid_vla_ros.bench import gil
from hybrid_vla_ros.bench.gil import GilSampler, gil_line, gil_shares

RAW = ["thread (101): MainThread;<module> (x.py:1);spin (x.py:3) 30",
       "thread (102): worker;run (y.py:9) 20",
       "thread (103): worker;other (y.py:12) 10",
       "thread (104);native_frame 5",
       "not a stack line",
       ""]


def test_raw_stacks_become_shares_of_the_expected_samples_by_thread_name():
    shares = gil_shares(RAW, expected_samples=100)
    assert shares == {"MainThread": 0.30, "worker": 0.30, "native thread 104": 0.05}
    assert gil_shares(RAW, expected_samples=0) == {}


def _busy(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(range(2000))


def _gemms(stop: threading.Event) -> None:
    a, b, c = torch.randn(1024, 1024), torch.randn(1024, 1024), torch.empty(1024, 1024)
    while not stop.is_set():   # ~10-50 ms of GEMM per call, the GIL released throughout
        torch.mm(a, b, out=c)


def test_a_python_loop_holds_the_gil_and_a_sleeper_or_a_gemm_thread_hardly_does():
    stop = threading.Event()
    threads = [threading.Thread(target=target, args=(stop,), name=name, daemon=True)
               for name, target in (("hvla-gil-busy", _busy), ("hvla-gil-gemm", _gemms))]
    threads.append(threading.Thread(target=stop.wait, name="hvla-gil-sleeper", daemon=True))
    for thread in threads:
        thread.start()
    time.sleep(0.3)   # past the GEMM thread's first call (oneDNN's set-up holds the GIL)
    try:
        with GilSampler(rate_hz=200) as sampler:
            time.sleep(2.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    report = sampler.report()
    assert "gil_unavailable" not in report, report
    shares = report["gil_held_share"]
    assert shares.get("hvla-gil-busy", 0.0) > 0.4, report          # ~0.7-0.9: it only yields at switch intervals
    assert shares.get("hvla-gil-gemm", 0.0) < shares["hvla-gil-busy"] / 2, report
    assert shares.get("hvla-gil-sleeper", 0.0) < 0.02 and shares.get("MainThread", 0.0) < 0.05, report
    sampling = report["gil_sampling"]   # ~400 samples at random times: a share is good to ~5% (Poisson)
    assert sampling["rate_hz"] == 200 and 1.9 < sampling["span_s"] < 4.0 and sampling["share_noise"] < 0.06
    assert 0.0 <= report["gil_held_by_none"] and sum(shares.values()) <= 1.0 + 4 * sampling["share_noise"], report
    assert "hvla-gil-busy" in gil_line(report)


def test_without_py_spy_the_span_runs_and_the_report_says_why(monkeypatch):
    monkeypatch.setattr(gil, "py_spy_path", lambda: None)
    ran = []
    with GilSampler() as sampler:
        ran.append(True)
    assert ran and sampler.report() == {"gil_unavailable": "py-spy is not installed (pip install py-spy)"}
    assert gil_line(sampler.report()) == ("graph (one process), GIL: not sampled (py-spy is not installed "
                                          "(pip install py-spy))")


def test_a_process_py_spy_cannot_attach_to_is_reported_with_its_reason():
    import subprocess
    import sys
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with GilSampler(pid=gone.pid) as sampler:
        pass
    assert sampler.report()["gil_unavailable"].startswith("py-spy did not start sampling: "), sampler.report()
