"""`hybrid-vla verify` and `bench` on an action-token model (issue 51, item 2's verify and bench cells for tiny-act).
verify: ActionFlow's packed decoding split at every p against sequential decoding (engine/actionflow/verify.py);
equal tokens at every cut give the trajectory's difference 0.0; a frame whose tokens differ is named and fails the
command. bench: native, serial and pipelined side by side (bench/action_tokens/modes.py), each exact against native."""

import json

from hybrid_vla_ros.cli import main
from hybrid_vla_ros.engine.actionflow import verify as token_verify


def test_verify_prints_zero_at_every_cut_for_an_action_token_model(capsys):
    assert main(["verify", "--preset", "tiny-act"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("tiny-act (") and "action tokens" in lines[0]
    assert [line.split("max_abs_diff=")[1] for line in lines[1:]] == ["0.000e+00"] * 5
    assert main(["verify", "--preset", "tiny-act", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["partition"] for r in report["results"]] == list(range(report["num_blocks"] + 1))
    assert all(r["max_abs_diff"] == 0.0 and not r["frames_with_other_tokens"] for r in report["results"])
    assert report["frames"] == 2 and all(n > 1 for n in report["tokens_per_frame"].values())


def test_verify_names_a_frame_whose_tokens_differ_and_fails(capsys, monkeypatch):
    """The reference's tokens of frame 1 changed: every cut reports it, and the command exits 1."""
    sequential = token_verify.sequential_results

    def changed(model, frames, decode=None):
        out = sequential(model, frames, decode)
        out[1].tokens = [out[1].tokens[0] + 1, *out[1].tokens[1:]]
        return out
    monkeypatch.setattr(token_verify, "sequential_results", changed)
    assert main(["verify", "--preset", "tiny-act"]) == 1
    lines = capsys.readouterr().out.strip().splitlines()[1:]
    assert len(lines) == 5 and all("max_abs_diff=inf" in line and "frames [1]" in line for line in lines)


def test_verify_refuses_other_dtypes_and_devices_for_an_action_token_model_in_one_line(capsys):
    for args in (["--dtype", "bf16"], ["--prefix-device", "cuda"]):
        assert main(["verify", "--preset", "tiny-act", *args]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and args[-1] in err and "fp32" in err, err


def test_bench_runs_native_serial_and_pipelined_on_an_action_token_checkpoint(capsys, tmp_path):
    """A checkpoint, so that the pipelined mode's suffix process reads the same weights (by the directory, not the
    preset's name: bench/action_tokens/packs.py model_source)."""
    from hybrid_vla_ros.model.checkpoint import save_checkpoint
    from hybrid_vla_ros.model.load import load_vla
    save_checkpoint(load_vla(preset="tiny-act"), tmp_path / "act")
    assert main(["bench", "--checkpoint", str(tmp_path / "act"), "--frames", "4", "--pack", "2",
                 "--json", str(tmp_path / "b.json"), "--plot", str(tmp_path / "b.png")]) == 0
    table = capsys.readouterr().out
    report = json.loads((tmp_path / "b.json").read_text())
    assert list(report["modes"]) == ["native", "serial", "pipelined"] and report["exact"]
    for name, mode in report["modes"].items():
        assert mode["exact"] and mode["frames_per_s"] > 0 and f"  {name} " in table, name
    assert report["pack"] == 2 and report["partition"] == 2 and (tmp_path / "b.png").stat().st_size > 0


def test_bench_refuses_for_an_action_token_model_what_it_would_not_run_in_one_line(capsys):
    for args in (["--dtype", "bf16"], ["--suffix-dtype", "int8"], ["--pack", ","]):
        assert main(["bench", "--preset", "tiny-act", *args]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and args[-1] in err, err


def test_memory_refuses_for_an_action_token_model_a_dtype_its_servers_would_not_read(capsys):
    assert main(["memory", "--preset", "tiny-act", "--partition", "1", "--dtype", "bf16"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--dtype bf16" in err and "fp32" in err, err
