"""`assistant models` over sets made by real pulls: listing, choosing the default, removing with and without files."""

import pytest

from assistant import cli, home, modelsets
from converters import convert, output_projection


@pytest.fixture
def two_sets(fake_hub, tiny_checkpoint, capsys):
    """Two pulled sets sharing one draft file, as a user who pulled two targets with the same draft has."""
    for seed, repo in enumerate(("org/alpha", "org/beta", "org/mini")):
        fake_hub.add_repo(repo, tiny_checkpoint("qwen2", seed=seed))
    assert cli.main(["pull", "org/alpha", "--draft", "org/mini"]) == 0
    assert cli.main(["pull", "org/beta", "--draft", "org/mini"]) == 0
    out = capsys.readouterr().out
    assert f"draft org/mini: reusing {home.models_dir() / 'mini.mxfp4.gguf'}" in out
    assert sum(1 for r in fake_hub.gets("org/mini") if r.filename == "model.safetensors") == 1
    return modelsets.get("alpha"), modelsets.get("beta")


def models(*argv) -> int:
    return cli.main(["models", *argv])


def test_list_shows_levels_files_sizes_and_the_default(two_sets, capsys):
    alpha, beta = two_sets
    assert models() == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("* alpha  3 levels, ") and lines[0].endswith("(default)")
    # what the set needs in memory: its weights, and the cache and buffers of a 4096-token context beside them
    need, unit = lines[4].split()[1:3]
    assert lines[4].endswith("of memory here at 4096 tokens of context")
    assert float(need) * {"MB": 1e6, "GB": 1e9}[unit] > sum(level.path.stat().st_size for level in alpha.levels)
    assert lines[5].startswith("  beta  3 levels, ")
    for line, level in zip(lines[1:4], alpha.levels):
        number, role, size, unit, path, *note = line.split()
        assert (role, path) == (level.role, str(level.path))
        assert abs(float(size) * {"MB": 1e6, "kB": 1e3}[unit] - level.path.stat().st_size) < 0.06 * 1e6
        # the MXFP4 files (the copy, the draft converted by pull) say how their output projection is stored
        assert " ".join(note) == ("" if role == "target" else "(output projection MXFP4)")
    assert [line.split()[1] for line in lines[6:9]] == ["target", "mxfp4", "draft"]
    assert models("list") == 0
    assert capsys.readouterr().out == out


def test_default_switches_what_commands_use(two_sets, capsys):
    assert models("default", "beta") == 0
    assert capsys.readouterr().out == "'beta' is now the default model set\n"
    assert modelsets.get().name == "beta"
    assert models() == 0
    assert [line.split()[1] for line in capsys.readouterr().out.splitlines() if line.startswith("* ")] == ["beta"]
    assert models("default", "gamma") == 1
    assert capsys.readouterr().err == "error: no model set named 'gamma' (registered: alpha, beta)\n"


def test_remove_with_files_keeps_what_another_set_uses(two_sets, capsys):
    alpha, beta = two_sets
    draft = alpha.levels[2].path
    assert beta.levels[2].path == draft

    assert models("remove", "alpha", "--delete-files") == 0
    out = capsys.readouterr().out
    assert f"deleted {alpha.levels[0].path}" in out and f"kept {draft}" in out
    assert "default model set: beta" in out
    assert not alpha.levels[0].path.exists() and not alpha.levels[1].path.exists()
    assert draft.exists() and modelsets.get().name == "beta"

    assert models("remove", "beta", "--delete-files") == 0
    assert sorted(p.name for p in home.models_dir().iterdir()) == ["modelsets.json"]
    assert models() == 0
    assert "no model sets in" in capsys.readouterr().out


def test_remove_without_files_and_missing_files(two_sets, capsys):
    alpha, _ = two_sets
    assert models("remove", "alpha") == 0
    assert capsys.readouterr().out == "removed model set 'alpha'\ndefault model set: beta\n"
    assert all(level.path.exists() for level in alpha.levels), "files stay unless --delete-files"
    modelsets.get("beta").levels[0].path.unlink()
    assert models() == 0
    assert "MISSING" in capsys.readouterr().out.splitlines()[1]
    assert models("remove", "alpha") == 1
    assert "no model set named 'alpha'" in capsys.readouterr().err


def test_files_outside_the_models_directory_are_never_deleted(tmp_path, capsys):
    outside = tmp_path / "mine.gguf"
    outside.write_bytes(b"GGUF")
    modelsets.register("mine", [modelsets.Level("target", outside)])
    assert models("remove", "mine", "--delete-files") == 0
    assert outside.exists()
    assert "kept" in capsys.readouterr().out


def test_a_set_remembers_where_its_target_runs(demo_set, capsys):
    assert cli.main(["models", "remote", "demo", "192.168.1.20:50052"]) == 0
    assert "on the RPC server at 192.168.1.20:50052" in capsys.readouterr().out
    assert modelsets.get("demo").target_rpc == "192.168.1.20:50052"
    assert modelsets.get("demo").first(1).target_rpc == "192.168.1.20:50052"
    modelsets.register("demo", demo_set.levels)  # converted again: where the target runs is kept
    assert modelsets.get("demo").target_rpc == "192.168.1.20:50052"
    cli.main(["models", "list"])
    assert "the target runs on the RPC server at 192.168.1.20:50052" in capsys.readouterr().out
    assert cli.main(["models", "remote", "demo", "nowhere"]) == 1
    assert "HOST:PORT" in capsys.readouterr().err
    assert cli.main(["models", "remote", "demo", "off"]) == 0
    assert modelsets.get("demo").target_rpc is None


def test_list_names_each_copys_output_projection_older_copies_bf16(tiny_checkpoint, monkeypatch, capsys):
    """A copy converted before the choice was recorded kept its output projection BF16, and is listed so; a
    draft without the key says nothing (it may be any file)."""
    checkpoint = tiny_checkpoint("qwen2", tied=True)
    models_dir = home.models_dir()
    q8 = convert(checkpoint, outdir=models_dir, name="q8", mxfp4_output="q8_0", progress=False)
    monkeypatch.setattr(output_projection, "record", lambda writer, qtype: None)  # as converters did before
    old = convert(checkpoint, outdir=models_dir, name="old", mxfp4_output="bf16", progress=False)
    modelsets.register("q8", [modelsets.Level("target", q8["bf16"]), modelsets.Level("mxfp4", q8["mxfp4"])])
    modelsets.register("old", [modelsets.Level("target", old["bf16"]), modelsets.Level("mxfp4", old["mxfp4"]),
                               modelsets.Level("draft", old["mxfp4"])])
    assert output_projection.recorded(old["mxfp4"]) is None
    assert models("list") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].endswith(f"{q8['mxfp4']}  (output projection Q8_0)")
    assert lines[1].endswith(str(q8["bf16"])) and lines[5].endswith(str(old["bf16"]))
    assert lines[6].endswith(f"{old['mxfp4']}  (output projection BF16)")
    assert lines[7].endswith(str(old["mxfp4"]))
