"""The bundled demo set: converted into the data directory on first use, reused afterwards."""

from assistant import demo, modelsets


def test_first_use_converts_and_registers_three_levels_then_reuses_them():
    model_set = demo.ensure_demo_set()
    assert [level.role for level in model_set.levels] == ["target", "mxfp4", "draft"]
    assert [level.path.name for level in model_set.levels] == [
        "demo-target.bf16.gguf", "demo-target.mxfp4.gguf", "demo-draft.mxfp4.gguf"]
    assert modelsets.get().name == demo.NAME, "the demo set becomes the default when nothing else is registered"
    written = {level.path: level.path.stat().st_mtime_ns for level in model_set.levels}

    again = demo.ensure_demo_set()
    assert {level.path: level.path.stat().st_mtime_ns for level in again.levels} == written


def test_a_missing_file_is_converted_again():
    model_set = demo.ensure_demo_set()
    model_set.levels[2].path.unlink()
    assert not demo.ensure_demo_set().missing_files()
