"""The model-set registry: a JSON file in the models directory, atomic writes, paths relative to it."""

import json

import pytest

from assistant import home, modelsets


def make_files(tmp_path, *names):
    paths = []
    for name in names:
        path = home.models_dir() / name
        path.write_bytes(b"GGUF")
        paths.append(path)
    return paths


def test_register_get_default_and_remove(tmp_path):
    target, mxfp4, other = make_files(tmp_path, "a.bf16.gguf", "a.mxfp4.gguf", "b.bf16.gguf")
    modelsets.register("a", [modelsets.Level("target", target), modelsets.Level("mxfp4", mxfp4)])
    modelsets.register("b", [modelsets.Level("target", other)])
    assert modelsets.get().name == "a", "the first set registered becomes the default"
    modelsets.set_default("b")
    assert modelsets.get().name == "b"
    assert [lv.path for lv in modelsets.get("a").levels] == [target, mxfp4]

    stored = json.loads(modelsets.registry_path().read_text())
    assert stored["sets"]["a"]["levels"][0]["path"] == "a.bf16.gguf", "paths inside the models dir are relative"

    modelsets.remove("b", delete_files=True)
    assert not other.exists()
    assert modelsets.get().name == "a"


def test_remove_keeps_files_another_set_uses(tmp_path):
    (shared,) = make_files(tmp_path, "shared.gguf")
    modelsets.register("one", [modelsets.Level("target", shared)])
    modelsets.register("two", [modelsets.Level("target", shared)])
    modelsets.remove("one", delete_files=True)
    assert shared.exists()


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(modelsets.ModelSetError, match="no model set is registered"):
        modelsets.get()
    modelsets.registry_path().write_text("{not json")
    with pytest.raises(modelsets.ModelSetError, match="modelsets.json"):
        modelsets.get("x")


def test_first_cuts_the_chain():
    chain = modelsets.ModelSet("s", [modelsets.Level(r, home.models_dir() / r) for r in ("target", "mxfp4", "draft")])
    assert [lv.role for lv in chain.first(2).levels] == ["target", "mxfp4"]
    with pytest.raises(modelsets.ModelSetError):
        chain.first(4)
