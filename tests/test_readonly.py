"""Read-only guarantee: no command creates, changes or removes a file among its inputs.

Every command ``hsdiff --help`` lists runs over copies of the fixtures; a snapshot of every file
(sha256, size, mode, mtime) and every directory (its listing and mtime, so a temporary file made and
removed beside the dumps is caught too) is taken before and after. Outputs go to a separate folder.

A command added to the CLI without an entry in :data:`ARGS` fails :func:`test_every_command_is_covered`:
add the arguments a user would give it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from hsdiff.cli import cli

from . import builders as B


@dataclass
class Env:
    inputs: Path
    out: Path

    def __getitem__(self, rel: str) -> str:
        return str(self.inputs / rel)

    def o(self, name: str) -> str:
        return str(self.out / name)


Run = tuple[list[str], tuple[int, ...]]  # argv, accepted exit codes


def _tiny_model(env: Env) -> str | None:
    """A 2-layer random Llama with SmolLM2's vocabulary, so ``capture`` runs a real forward pass."""
    if importlib.util.find_spec("transformers") is None:
        return None
    d = env.inputs / "tiny-model"
    if not d.exists():
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        cfg = LlamaConfig(
            vocab_size=49152,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=256,
        )
        LlamaForCausalLM(cfg).save_pretrained(d)
    return str(d)


def _compare(e: Env) -> list[Run]:
    runs: list[Run] = [
        (
            [
                "compare",
                e["seed/train"],
                e["seed/infer-wrong"],
                "--layer-ids=-1,2,30",
                "--json",
                e.o("c.json"),
                "--plot",
                e.o("c.png"),
            ],
            (1,),
        ),
        (
            [
                "compare",
                e["seed/train"],
                e["seed/infer-fixed-neighbours"],
                "--layer-ids",
                "2,30,58",
                "--json",
                "-",
                "--model-config",
                e["seed/model/config.json"],
            ],
            (0,),
        ),
        (["compare", e["real/modelopt"], e["real/sglang-dumper"], "--json", "-"], (0, 1)),
        (["compare", e["corpus/train.gz"], e["seed/infer-fixed"], "--layer-ids", "2,30,58"], (0, 1)),
    ]
    if importlib.util.find_spec("hsdiff.readers.debuglog") is not None:
        runs.append((["compare", e["real/modelopt"], e["real/sglang-dumper.log"], "--json", "-"], (0, 1)))
    return runs


def _gate(e: Env) -> list[Run]:
    return [
        (
            [
                "gate",
                e["seed/train"],
                e["seed/infer-wrong"],
                "--draft-config",
                e["seed/draft-wrong/config.json"],
                "--target-config",
                e["seed/model/config.json"],
                "--json",
                e.o("g.json"),
                "--junit",
                e.o("g.xml"),
                "--markdown",
                e.o("g.md"),
                "--plot",
                e.o("g.png"),
            ],
            (1,),
        ),
        (
            [
                "gate",
                e["seed/train"],
                e["seed/infer-fixed-neighbours"],
                "--draft-config",
                e["seed/draft-fixed"],
                "--target-config",
                e["seed/model"],
                "--github",
            ],
            (0,),
        ),
    ]


def _check_config(e: Env) -> list[Run]:
    return [
        (
            [
                "check-config",
                e["seed/draft-wrong/config.json"],
                "--target-config",
                e["seed/model/config.json"],
                "--json",
                e.o("cc.json"),
                "--junit",
                e.o("cc.xml"),
                "--markdown",
                e.o("cc.md"),
                "--github",
            ],
            (0, 1),
        ),
        (
            ["check-config", e["seed/draft-fixed"], "--engine", "vllm", "--vllm-runner", "v2", "--num-layers", "61"],
            (0, 1),
        ),
    ]


def _ids(e: Env) -> list[Run]:
    return [(["ids", "2,30,58", "--from", "sglang", "--to", "vllm", "--num-layers", "61", "--explain"], (0,))]


def _fix_config(e: Env) -> list[Run]:
    # writing the draft config is fix-config's job: here only --dry-run runs over the fixtures; the
    # real write is checked by test_fix_config_writes_only_the_config_and_its_backup
    return [
        (["fix-config", e["seed/draft-wrong/config.json"], "--layer-ids", "2,30,58", "--dry-run"], (0,)),
        (
            ["fix-config", e["seed/draft-wrong/config.json"], "--from-report", e["corpus/report.json"], "--dry-run"],
            (0,),
        ),
    ]


def _request(e: Env) -> list[Run]:
    return [
        (["request", e["seed/train/rows_0-2000/data_1.ckpt"]], (0,)),
        (
            [
                "request",
                e["seed/train"],
                "--sample",
                "data_1",
                "--engine",
                "vllm",
                "--model",
                "m",
                "--url",
                "http://localhost:8000",
            ],
            (0,),
        ),
        (["request", e["real/modelopt/example-0.pt"], "--engine", "sglang"], (0,)),
    ]


def _capture(e: Env) -> list[Run]:
    model = _tiny_model(e)
    if model is None:  # without the capture extra: a clean input error, still nothing written
        return [
            (
                [
                    "capture",
                    "--model",
                    e["seed/model"],
                    "--input",
                    e["seed/train/rows_0-2000/data_1.ckpt"],
                    "--out",
                    e.o("ref"),
                ],
                (2,),
            )
        ]
    return [
        (
            [
                "capture",
                "--model",
                model,
                "--input",
                e["seed/train/rows_0-2000/data_1.ckpt"],
                "--out",
                e.o("ref"),
                "--dtype",
                "fp32",
            ],
            (0,),
        )
    ]


def _audit(e: Env) -> list[Run]:
    return [
        (["audit", e["seed/train"], "--workers", "0", "--json", e.o("audit.json")], (0,)),
        (["audit", e["corpus/train.gz"], "--workers", "0", "--checkpoint", e.o("audit.ck")], (0,)),
    ]


def _inspect(e: Env) -> list[Run]:
    return [
        (["inspect", e["seed/train"]], (0,)),
        (["inspect", e["seed/infer-wrong"], "--json", e.o("inspect.json")], (0,)),
        (["inspect", e["real/sglang-dumper.log"], "--json", "-"], (0,)),
        *[(["inspect", e[f"formats/{name}"]], (0,)) for name in _FORMATS],
    ]


def _fingerprint(e: Env) -> list[Run]:
    # written where --out says; without it, beside the draft (the draft's folder is the user's own, by design)
    fp = e.o("seed-fingerprint.safetensors")
    return [
        (
            [
                "fingerprint",
                "--from",
                e["seed/states-sample-1.safetensors"],
                "--train",
                e["seed/train"],
                "--draft",
                e["seed/draft-fixed"],
                "--target-config",
                e["seed/model/config.json"],
                "--out",
                fp,
            ],
            (0,),
        ),  # fmt: skip
        (["gate", e["seed/infer-fixed"], "--fingerprint", fp, "--draft-config", e["seed/draft-fixed"], "-q"], (0,)),
        (["compare", fp, e["seed/infer-wrong"], "--layer-ids=-1,2,30", "--json", e.o("fp.json")], (1,)),
    ]


def _watch(e: Env) -> list[Run]:
    log = e["engine-logs/vllm-0.32-cpu.log"]  # a real vLLM log: its acceptance lines, followed
    out = ["--events", e.o("watch.jsonl"), "--state", e.o("watch-state.json")]
    return [
        (["watch", "--once", "--log", log, "--baseline", "1.19", "--window-drafts", "3", *out], (0, 1)),
        (["watch", "--once", "--log", log, "--baseline", "1.19", "--window-drafts", "3", *out], (0, 1)),
        (["watch", "--log", log, "--window-drafts", "5", "--interval", "0", "--max-windows", "2", "-q"], (0, 1)),
    ]


#: A dump of every format whose reader opens more than the file it is given (provenance, locks, shards,
#: siblings) or decompresses: inspected over copies, like the fixtures.
_FORMATS: dict[str, Callable[[Path], object]] = {
    "speculators": lambda d: B.speculators_dir(d, [0], [2, 15, 27, 30]),
    "vllm-locked": lambda d: B.vllm_file(d, 0, [2, 15, 27], lock=True),
    "vllm-online": lambda d: B.vllm_online(d, 0, [2, 15, 27], prompt=18),
    "deepspec": lambda d: B.deepspec_cache(d),
    "verl": lambda d: B.verl_feature_store(d),
    "trtllm": lambda d: B.trtllm_file(d),
    "trtllm-debug": lambda d: B.trtllm_debug_dump(d, 0),
    "sglang-hook": lambda d: B.sglang_hook_dump(d, 0, layers=[1, 2]),
    "sglang-http": lambda d: B.sglang_response(d / "resp.json", 0, [2, 15, 27]),
}


#: Arguments per command, as a user would give them; inputs under ``Env.inputs``, outputs under ``Env.out``.
ARGS: dict[str, Callable[[Env], list[Run]]] = {
    "compare": _compare,
    "gate": _gate,
    "check-config": _check_config,
    "ids": _ids,
    "fix-config": _fix_config,
    "request": _request,
    "capture": _capture,
    "audit": _audit,
    "inspect": _inspect,
    "watch": _watch,
    "fingerprint": _fingerprint,
}


# --------------------------------------------------------------------------- snapshots


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: files by content and metadata, directories by listing and mtime."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        st = d.stat()
        out[str(d.relative_to(root)) + "/"] = ("dir", st.st_mtime_ns, st.st_mode, tuple(sorted(dirnames + filenames)))
        for name in filenames:
            p = d / name
            st = p.lstat()
            if p.is_symlink():
                out[str(p.relative_to(root))] = ("link", os.readlink(p))
                continue
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            out[str(p.relative_to(root))] = ("file", h.hexdigest(), st.st_size, st.st_mode, st.st_mtime_ns)
    return out


def diff(before: dict[str, tuple], after: dict[str, tuple]) -> list[str]:
    changes = [f"created {k}" for k in sorted(after.keys() - before.keys())]
    changes += [f"removed {k}" for k in sorted(before.keys() - after.keys())]
    changes += [
        f"changed {k}: {before[k]} -> {after[k]}" for k in sorted(before.keys() & after.keys()) if before[k] != after[k]
    ]
    return changes


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> Env:
    """Copies of the fixtures (never the originals), plus a gzipped dump and a report to read."""
    import gzip
    import json

    root = tmp_path_factory.mktemp("readonly")
    inputs, out = root / "inputs", root / "out"
    shutil.copytree(B.SEED, inputs / "seed")
    shutil.copytree(B.REAL, inputs / "real")
    shutil.copytree(B.FIXTURES / "engine-logs", inputs / "engine-logs")
    corpus = inputs / "corpus"
    (corpus / "train.gz" / "rows_0-2000").mkdir(parents=True)
    src = B.SEED / "train" / "rows_0-2000" / "data_1.ckpt"
    (corpus / "train.gz" / "rows_0-2000" / "data_1.ckpt.gz").write_bytes(
        gzip.compress(src.read_bytes(), compresslevel=1)
    )
    shutil.copy(B.SEED / "train" / "config.json", corpus / "train.gz" / "config.json")
    r = CliRunner().invoke(
        cli,
        [
            "compare",
            str(B.SEED / "train"),
            str(B.SEED / "infer-wrong"),
            "--layer-ids=-1,2,30",
            "--json",
            str(corpus / "report.json"),
        ],
    )
    assert r.exit_code == 1, r.output
    json.loads((corpus / "report.json").read_text())
    for name, build in _FORMATS.items():
        build(inputs / "formats" / name)
    out.mkdir()
    e = Env(inputs, out)
    _tiny_model(e) if "capture" in cli.load_all() else None  # made before the snapshot: it is an input
    return e


def test_every_command_is_covered() -> None:
    missing = sorted(set(cli.load_all()) - set(ARGS))
    assert not missing, (
        f"new command(s) {missing}: add the arguments a user would give them to ARGS in tests/test_readonly.py, "
        "so the read-only guarantee covers them"
    )


@pytest.mark.parametrize("command", sorted(cli.load_all()))
def test_command_leaves_its_inputs_untouched(env: Env, command: str) -> None:
    if command not in ARGS:
        pytest.fail(f"no arguments for command {command!r}: add them to ARGS in tests/test_readonly.py")
    runs = ARGS[command](env)
    assert runs, command
    before = snapshot(env.inputs)
    for argv, codes in runs:
        r = CliRunner().invoke(cli, argv)
        assert r.exit_code in codes, f"{argv}: exit {r.exit_code}\n{r.output}"
        assert "Traceback" not in r.output
        changes = diff(before, snapshot(env.inputs))
        assert not changes, f"{' '.join(argv)} touched its inputs:\n" + "\n".join(changes[:20])


def test_fix_config_writes_only_the_config_and_its_backup(env: Env, tmp_path: Path) -> None:
    """fix-config's one write: the draft config itself (atomically) and a byte-for-byte backup."""
    draft = tmp_path / "draft"
    shutil.copytree(env.inputs / "seed" / "draft-wrong", draft)
    original = (draft / "config.json").read_bytes()
    dumps_before = snapshot(env.inputs)
    r = CliRunner().invoke(cli, ["fix-config", str(draft / "config.json"), "--layer-ids", "2,30,58"])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in draft.iterdir()) == ["config.json", "config.json.bak"]
    assert (draft / "config.json.bak").read_bytes() == original
    assert (draft / "config.json").read_bytes() != original
    assert not diff(dumps_before, snapshot(env.inputs))


def test_snapshot_sees_every_kind_of_change(tmp_path: Path) -> None:
    """The snapshot itself is sensitive: a new, changed, removed or touched file, a temp file made and removed."""
    (tmp_path / "d").mkdir()
    f = tmp_path / "d" / "a.pt"
    f.write_bytes(b"x")
    base = snapshot(tmp_path)
    for mutate in (
        lambda: (tmp_path / "d" / "b.pt").write_bytes(b"y"),
        lambda: f.write_bytes(b"z"),
        lambda: f.unlink(),
        lambda: os.utime(f, ns=(0, 0)),
        lambda: (
            (tmp_path / "d" / ".tmp").write_bytes(b""),
            (tmp_path / "d" / ".tmp").unlink(),
            os.utime(tmp_path / "d", ns=(1, 1)),
        ),
    ):
        shutil.rmtree(tmp_path / "d")
        (tmp_path / "d").mkdir()
        f.write_bytes(b"x")
        os.utime(f, ns=(base["d/a.pt"][4], base["d/a.pt"][4]))
        os.utime(tmp_path / "d", ns=(base["d/"][1], base["d/"][1]))
        os.utime(tmp_path, ns=(base["./"][1], base["./"][1]))
        assert not diff(base, snapshot(tmp_path))
        mutate()
        assert diff(base, snapshot(tmp_path))
