"""`assistant bench` end to end on the trained bench pair (real conversions, real llama.cpp contexts, the real
llama-speculative-simple), plus its bad-input errors and the arithmetic of its summary."""

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assistant.bench import llamacpp, remote, runner, summary
from assistant.bench.workloads import DEFAULT_MODELS, DEFAULT_PROMPTS
from assistant.cli import main
from assistant.engine import backend
from assistant.errors import AssistantError
from native import build

ROOT = Path(__file__).resolve().parents[1]


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "assistant", "bench", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=900)


def test_quick_run_writes_report_with_every_pipeline_identical_to_the_target(tmp_path):
    pytest.importorskip("llama_cpp")
    out = tmp_path / "out"
    done = bench("--quick", "--limit", "1", "--max-tokens", "12", "--threads", "1", "--sweep-lengths", "2,4",
                 "--out", str(out), "--cache", str(tmp_path / "cache"))
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((out / "bench.json").read_text())
    workload = report["workloads"]["a"]
    keys = set(workload["runs"])
    assert {"llama.cpp-plain", "target", "sd-draft", "sd-mxfp4", "sd-ngram", "mlsd", "mlsd-adaptive", "sd-draft-mxfp4",
            "mlsd-adaptive-mxfp4", "mlsd-stock", "llama.cpp"} <= keys
    assert len(workload["llama_cpp_sweep"]) == 6  # three drafts (small BF16, small MXFP4, MXFP4 copy) x two lengths
    assert [level["role"] for level in workload["summary"]["mlsd-adaptive-mxfp4"]["levels"]] == [
        "target", "mxfp4", "draft-mxfp4", "ngram"]
    adaptive = workload["summary"]["mxfp4-adaptive"]["shapes"]
    assert sum(adaptive["rounds"].values()) >= 1 and all(shape.startswith("target") for shape in adaptive["rounds"])
    for key, row in workload["summary"].items():
        assert row["differing_prompts"] == 0 or key == "llama.cpp-plain", key  # (o) is not the lossless set-up
        assert row["tokens"] >= 1
        assert row["speedup_geomean"] > 0 and row["speedup_over_plain_geomean"] > 0
        assert row["speedup_after_prompt_geomean"] > 0 and 0 < row["prompt_share"] < 1
    assert workload["summary"]["target"]["speedup_geomean"] == pytest.approx(1.0)
    assert workload["summary"]["llama.cpp-plain"]["speedup_over_plain_geomean"] == pytest.approx(1.0)
    mlsd = workload["summary"]["mlsd"]["levels"]
    assert [level["role"] for level in mlsd] == ["target", "mxfp4", "draft"]
    assert 0 < mlsd[1]["acceptance"] <= 1 and mlsd[1]["proposed"] > 0
    text = (out / "bench.md").read_text()
    assert "| (iv) ML-SpecQD, 3 levels, k=8 |" in text and "2.72x" in text and "Machine:" in text
    assert "| after the prompt (geomean) |" in text and "- after the prompt " in text
    assert "Adaptive policy:" in text and "the best fixed pipeline" in text and "Target rounds per chain shape" in text
    rows = [line for line in text.splitlines() if line.startswith("| (")]
    assert rows[0].startswith("| (o) stock llama.cpp kernels and settings in our decoding loop")
    assert "over (o) stock kernels in our loop" in text
    assert (out / "speedups-a.png").stat().st_size > 0 and (out / "acceptance-a.png").stat().st_size > 0
    costs = {int(n): seconds for n, seconds in workload["verify_costs"].items()}
    assert sorted(costs) == list(range(1, 17)) and min(costs.values()) > 0
    assert workload["cost_samples"] == 1  # one after each prompt's runs
    bound = workload["ceiling"]
    assert bound["verify_seconds_per_token"] == pytest.approx(min(s / n for n, s in costs.items()))
    assert bound["speedup_geomean"] > 0 and bound["over_llama_cpp_geomean"] > 0
    assert "- ceiling on these kernels, with every drafted token accepted and drafting free: " in text
    oracle = workload["oracle"]
    assert oracle["pipeline"] in keys and oracle["roles"][0] == "target" and oracle["decode_seconds"] > 0
    assert oracle["speedup_geomean"] <= bound["speedup_geomean"] * 1.0001  # real drafts never beat perfect ones
    assert "- oracle for " in text and "(no policy can)" in text and "the same foresight within one shape" in text
    assert "  - the policy runs at " in text and "of the oracle's speed over the whole run" in text


def test_llama_speculative_simple_output_is_parsed_and_matches_our_greedy_text(tmp_path):
    """The program's echoed text must equal our target's own greedy answer: the identity check relies on it."""
    pytest.importorskip("llama_cpp")
    from assistant.bench import workloads
    from assistant.speculative import Pipeline

    workload = workloads.prepare("a", DEFAULT_MODELS, tmp_path, log=lambda m: None)
    messages = json.loads(DEFAULT_PROMPTS.read_text().splitlines()[3])["messages"]
    with Pipeline.load([workload.target], threads=1) as pipeline:
        from assistant.engine.chat_template import apply_chat_template

        prompt = apply_chat_template(pipeline.target, messages)
        answer = pipeline.chat(messages, max_tokens=24).finish()
    ours = answer.text
    result = llamacpp.run(build.tools_dir(), workload.target, workload.mxfp4, prompt, 24, 4, threads=1)
    assert result.drafted > 0 and 0 < result.accepted <= result.drafted
    assert result.seconds > result.prompt_seconds > 0 and result.prompt_tokens == answer.stats.prompt_tokens
    assert 0 < answer.stats.prompt_seconds < answer.stats.seconds
    assert result.text.startswith(ours) and len(ours) > 0
    if backend.cpu_variants():  # the program sees only the variant named: the plainest answers alike, none fails
        with pytest.MonkeyPatch.context() as patch:
            variants = backend.cpu_variants()
            patch.setenv("ASSISTANT_CPU_VARIANT", "x64" if "x64" in variants else variants[0])
            plain = llamacpp.run(build.tools_dir(), workload.target, workload.mxfp4, prompt, 24, 4, threads=1)
            patch.setenv("ASSISTANT_CPU_VARIANT", "pentium")
            with pytest.raises(AssistantError, match=llamacpp.PROGRAM):
                llamacpp.run(build.tools_dir(), workload.target, workload.mxfp4, prompt, 24, 4, threads=1)
        assert plain.text == result.text


def test_a_file_without_a_chat_template_is_benched_on_plain_prompts(gemma3_q4_k_m):
    """Gemma 3's Q4_K_M file stores no chat template: the bench gives our pipelines and llama.cpp's program the
    messages' text as a plain prompt, and reads the program's echo of it past the BOS it prints as "<bos>"."""
    pytest.importorskip("llama_cpp")
    from assistant.bench.worker import prompt_text, prompt_tokens
    from assistant.speculative import Pipeline

    messages = json.loads(DEFAULT_PROMPTS.read_text().splitlines()[0])["messages"]
    with Pipeline.load([gemma3_q4_k_m], threads=1, levels=1) as pipeline:
        assert pipeline.target.chat_template is None
        text = prompt_text(pipeline.target, messages)
        tokens = prompt_tokens(pipeline, messages)
        answer = pipeline.generate(tokens, max_tokens=8).finish()
    assert text.startswith(messages[0]["content"]) and tokens[0] == pipeline.target.bos_token
    result = llamacpp.run(build.tools_dir(), gemma3_q4_k_m, None, text, 8, 0, threads=1, spec_type=llamacpp.NGRAM)
    assert result.prompt_tokens == len(tokens) and result.new_tokens >= 1
    assert answer.stats.prompt_tokens == len(tokens)


def test_a_run_whose_output_was_cut_at_exit_is_made_again(tmp_path):
    """llama.cpp's logger may lose a fast program's last lines at exit: a run without its timing lines is made
    again (here a script that cuts them while its count of earlier runs is under a limit), and past ATTEMPTS
    runs the error names the program."""
    program = tmp_path / llamacpp.PROGRAM
    program.write_text(f"""#!/bin/sh
runs=$(cat {tmp_path}/runs 2>/dev/null || echo 0); echo $((runs + 1)) > {tmp_path}/runs
printf '\\n\\nthe prompt and its answer\\n\\n'
echo "I llama_model_loader: loaded" >&2
[ "$runs" -lt "$(cat {tmp_path}/cut)" ] && exit 0
echo "I encoded   12 tokens in    0.010 seconds, speed: 1200.0 t/s" >&2
echo "I decoded    5 tokens in    0.050 seconds, speed: 100.0 t/s" >&2
printf '0.01 I n_predict = 5\\n0.01 I n_drafted = 4\\n0.01 I n_accept  = 2\\n' >&2
""")
    program.chmod(0o755)
    (tmp_path / "cut").write_text(str(llamacpp.ATTEMPTS - 1))
    result = llamacpp.run(tmp_path, tmp_path / "t.gguf", tmp_path / "d.gguf", "the prompt", 5, 4, threads=1)
    assert (result.text, result.new_tokens, result.drafted, result.accepted) == (" and its answer", 5, 4, 2)
    assert (tmp_path / "runs").read_text().strip() == str(llamacpp.ATTEMPTS)
    (tmp_path / "runs").unlink()
    (tmp_path / "cut").write_text(str(llamacpp.ATTEMPTS))
    with pytest.raises(AssistantError, match=f"{llamacpp.PROGRAM}: could not find its timing"):
        llamacpp.run(tmp_path, tmp_path / "t.gguf", tmp_path / "d.gguf", "the prompt", 5, 4, threads=1)


def test_every_worker_run_evaluates_its_whole_prompt(bench_gguf):
    """The warm-up runs the first prompt and consecutive prompts share the chat template's opening; a run that
    found them in the cache would skip work llama.cpp's program (a fresh process per prompt) always does."""
    from assistant.bench.worker import Worker

    worker = Worker()
    roles = ["target", "mxfp4", "draft"]
    paths = [str(bench_gguf[name]) for name in ("target_bf16", "target_mxfp4", "draft_bf16")]
    worker.load({"chain": {"paths": paths, "roles": roles, "draft_length": 4, "confidence": None, "ngram": False}},
                n_ctx=512, threads=1)
    messages = [{"role": "user", "content": "Write a function that reverses a string."}]
    first = worker.run("chain", messages, max_tokens=8)
    held = []
    for level in worker.pipelines["chain"].levels:
        evaluate = level.context.evaluate
        level.context.evaluate = lambda sequence, first_output, evaluate=evaluate, context=level.context: (
            held.append(len(context.tokens)), evaluate(sequence, first_output))[1]
    again = worker.run("chain", messages, max_tokens=8)
    assert held[0] == 0 and len(held) >= 2  # the target's first evaluation starts from an empty cache
    assert again["tokens"] == first["tokens"] and again["prompt_seconds"] > 0


def test_verification_costs_time_exactly_the_new_tokens_after_the_prompt(bench_gguf):
    """Each timed batch must be n tokens the cache does not hold (for n = 1, the rows the target evaluates a
    step: one with our kernels, two where it pairs rows), after the whole prompt; the cache is left empty."""
    from assistant.bench.worker import Worker

    worker = Worker()
    worker.load({"target": {"paths": [str(bench_gguf["target_bf16"])], "roles": ["target"], "draft_length": 1,
                            "confidence": None, "ngram": False}}, n_ctx=512, threads=1)
    context = worker.pipelines["target"].chain.levels[0].context
    batches = []
    evaluate = context.evaluate
    context.evaluate = lambda sequence, first_output: (
        evaluate(sequence, first_output), batches.append((len(sequence) - first_output, context.last_batch)))[0]
    messages = [{"role": "user", "content": "Write a function that reverses a string."}]
    reply = worker.verify_costs("target", messages, sizes=[1, 2, 5], reps=2)
    assert sorted(reply["seconds"]) == ["1", "2", "5"] and min(reply["seconds"].values()) > 0
    prompt_rows = batches[0][1]
    assert context.min_batch == 1  # every weight and the attention on our kernels
    assert prompt_rows > 10 and batches[1:] == [(1, 1), (2, 2), (5, 5)] * 2
    assert context.tokens == []


def test_ceiling_is_the_prompt_plus_the_cheapest_verification_per_token():
    from assistant.bench import ceiling

    target = {"prompt_seconds": 1.0, "new_tokens": 100, "seconds": 11.0, "tokens_per_second": 100 / 11.0}
    runs = {"target": [target, dict(target, prompt_seconds=3.0, seconds=13.0, tokens_per_second=100 / 13.0)],
            "llama.cpp": [{"tokens_per_second": 15.0}, {"tokens_per_second": 10.0}]}
    bound = ceiling.ceiling(runs, {"1": 0.1, "2": 0.12, "4": 0.16, "8": 0.4}, light=10.0)
    assert bound["verify_batch"] == 4 and bound["verify_seconds_per_token"] == pytest.approx(0.04)
    # prompt 1 s + 100 x 0.04 s = 5 s (20 tokens/s, 2.2x the target's 11 s); prompt 3 s: 7 s (13/7 x)
    assert bound["speedup_geomean"] == pytest.approx((11 / 5 * 13 / 7) ** 0.5)
    assert bound["over_llama_cpp_geomean"] == pytest.approx((20 / 15 * (100 / 7) / 10) ** 0.5)
    assert bound["tokens_per_second_median"] == pytest.approx((20 + 100 / 7) / 2)
    assert bound["speed_of_light"] == pytest.approx((20 + 100 / 7) / 2 / 10)
    assert ceiling.ceiling(runs, None) is None
    assert ceiling.ceiling({"target": [dict(target, prompt_seconds=None)]}, {"1": 0.1}) is None


def test_oracle_finds_the_cheapest_rounds_knowing_where_drafts_are_right():
    from assistant.bench.oracle import agreement_runs, least_seconds

    assert agreement_runs([True, True, False, True]) == [2, 1, 0, 1]
    target = {1: 1.0, 2: 1.0, 3: 1.2, 4: 2.0}
    # a free drafter right everywhere: two rounds of 2 drafted + 1 (1.2 s each) beat 3 rounds of 1 + 1 (1.0 s)
    assert least_seconds([None, [6, 5, 4, 3, 2, 1]], [target, None], 6) == pytest.approx(2.4)
    # never right: the target alone, token by token
    assert least_seconds([None, [0] * 6], [target, None], 6) == pytest.approx(6.0)
    # right only from position 2 on: two tokens alone, then the last four for 2.0 s (two rounds of 1 + 1)
    assert least_seconds([None, [0, 0, 4, 3, 2, 1]], [target, None], 6) == pytest.approx(4.0)
    # a model level drafting for the target, itself drafted for by a free level: the target verifies 3 drafted
    # tokens at once (10 s); the model gets them in one round (1 s) from the free level's 2 right ones
    flat, cheap = {b: 10.0 for b in range(1, 6)}, {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.5}
    runs = [None, [4, 3, 2, 1], [2, 1, 0, 0]]
    assert least_seconds(runs, [flat, cheap, None], 4) == pytest.approx(11.0)
    assert least_seconds(runs[:2], [flat, cheap], 4) == pytest.approx(13.0)  # alone, the model takes 3 rounds
    # a noisy cost lower for more tokens counts for fewer too (a level never pays to propose a wrong token)
    assert least_seconds([None, [0] * 3], [{1: 1.0, 2: 0.5}, None], 3) == pytest.approx(1.5)


def test_oracle_bound_is_the_prompt_plus_the_least_decoding_per_prompt():
    from assistant.bench import oracle

    target = {"prompt_seconds": 1.0, "new_tokens": 4, "seconds": 5.0, "tokens_per_second": 4 / 5.0}
    chain = {"prompt_seconds": 1.0, "new_tokens": 4, "seconds": 3.0, "tokens_per_second": 4 / 3.0}
    runs = {"target": [target, target], "chain": [chain, chain],
            "llama.cpp": [{"tokens_per_second": 1.0}, {"tokens_per_second": 2.0}]}
    inputs = {"pipeline": "chain", "roles": ["target", "ngram", "lookup"], "costs": [None, None, None],
              "runs": [[None, [4, 3, 2, 1], [0, 0, 0, 0]], [None, [0, 0, 0, 0], [0, 1, 0, 0]]]}
    bound = oracle.oracle(runs, {"1": 1.0, "2": 1.0, "3": 1.2, "4": 1.5, "5": 1.5}, inputs, light=2.0)
    # prompt 1: 1 s + one round of 4 drafted (1.5 s); prompt 2: 1 s + 3 x 1 s (the second proposer's one token)
    assert bound["decode_seconds"] == pytest.approx(4.5) and bound["policy_decode_seconds"] == pytest.approx(4.0)
    # each shape alone: the first proposer alone misses prompt 2's token; the second alone has prompt 1 to do alone
    assert bound["shape_decode_seconds"] == pytest.approx({"target<-ngram": 5.5, "target<-lookup": 7.0})
    assert bound["speedup_geomean"] == pytest.approx((5 / 2.5 * 5 / 4.0) ** 0.5)
    assert bound["over_llama_cpp_geomean"] == pytest.approx((4 / 2.5 / 1.0 * 4 / 4.0 / 2.0) ** 0.5)
    assert bound["speed_of_light"] == pytest.approx((4 / 2.5 + 4 / 4.0) / 2 / 2.0)
    # the policy's share of a bound over the whole run: (the target's prompts + the bound's decoding) / the policy's
    assert oracle.policy_share(bound, bound["decode_seconds"]) == pytest.approx((2.0 + 4.5) / 6.0)
    assert oracle.policy_share(bound, bound["shape_decode_seconds"]["target<-lookup"]) == pytest.approx(9.0 / 6.0)
    assert oracle.oracle(runs, None, inputs) is None and oracle.oracle(runs, {"1": 1.0}, None) is None


def test_agreement_of_the_target_with_itself_is_every_token(bench_gguf):
    """The oracle's input on a real chain: a drafter that is the target itself proposes every token of the
    target's answer (teacher-forced in one batch, as the target decoded it token by token), and the n-gram
    level's runs are what its proposals there match."""
    from assistant.bench.worker import Worker
    from assistant.engine.chat_template import chat_prompt_tokens
    from assistant.engine.sequence import TokenSequence

    worker = Worker()
    target = str(bench_gguf["target_bf16"])
    worker.load({"target": {"paths": [target], "roles": ["target"], "draft_length": 1, "confidence": None,
                            "ngram": False},
                 "self": {"paths": [target, target], "roles": ["target", "copy"], "draft_length": "adaptive",
                          "confidence": None, "ngram": True}}, n_ctx=512, threads=1)
    messages = [{"role": "user", "content": "Write a function that reverses a string."}]
    answer = worker.run("target", messages, max_tokens=24)["tokens"]
    reply = worker.agreement("self", messages, answer, longest=15)
    assert reply["roles"] == ["target", "copy", "ngram"]
    copy, ngram = reply["runs"]
    assert copy == [min(len(answer) - p, 15) for p in range(len(answer))]
    prompt = chat_prompt_tokens(worker.pipelines["self"].target, messages)
    level = worker.pipelines["self"].levels[2]
    for p, run in enumerate(ngram):
        proposal = level.propose(TokenSequence(prompt + answer[:p]), 15)
        assert proposal[:run] == answer[p : p + run] and (run == len(proposal) or answer[p + run : p + run + 1] !=
                                                          proposal[run : run + 1])


def test_identity_check_flags_the_first_differing_token():
    base = {"tokens": [1, 2, 3, 4], "text": "abcd", "stop_reason": "max_tokens"}
    runs = {
        "target": [dict(base)],
        "mlsd": [dict(base, tokens=[1, 2, 9, 4])],
        "llama.cpp": [{"text": "abcde"}],  # overshoots the budget: still identical
        "sd-draft": [dict(base)],
    }
    runner._check_identity(runs)
    assert runs["mlsd"][0]["identical"] is False and runs["mlsd"][0]["first_difference"] == 2
    assert runs["llama.cpp"][0]["identical"] is True and runs["sd-draft"][0]["identical"] is True


def test_summary_speedups_are_per_prompt_ratios_with_geomean():
    def record(tps, identical=True):
        level = {"role": "target", "proposed": 0, "accepted": 0, "acceptance": 0, "mean_accepted_length": 0,
                 "seconds": 0.5}
        draft = {"role": "draft", "proposed": 10, "accepted": 5, "acceptance": 0.5, "mean_accepted_length": 2.0,
                 "seconds": 0.25}
        return {"tokens_per_second": tps, "seconds": 1.0, "prompt_seconds": 0.5, "new_tokens": int(tps),
                "identical": identical, "levels": [level, draft]}

    runs = {"target": [record(100), record(100)], "sd-draft": [record(200), record(50, identical=False)]}
    runs["sd-draft"][0]["prompt_seconds"] = 0.75  # then 200 tokens in 0.25 s: 4x the target's 100 in 0.5 s
    result = summary.summarize(runs)
    row = result["sd-draft"]
    assert row["speedup_after_prompt_geomean"] == pytest.approx(2 ** 0.5)  # sqrt(4 * 0.5)
    assert result["target"]["prompt_share"] == pytest.approx(0.5) and row["prompt_share"] == pytest.approx(0.625)
    del runs["sd-draft"][1]["prompt_seconds"]
    untimed = summary.summarize(runs)["sd-draft"]
    assert untimed["prompt_share"] is None and untimed["speedup_after_prompt_geomean"] == pytest.approx(4.0)
    assert row["speedup_geomean"] == pytest.approx(1.0)  # sqrt(2 * 0.5)
    assert (row["speedup_min"], row["speedup_max"]) == (0.5, 2.0)
    low, high = row["speedup_interval"]
    assert 0.5 <= low < 1.0 < high <= 2.0  # resampling two prompts: both halves, or one of each
    assert result["target"]["speedup_interval"] == pytest.approx((1.0, 1.0))
    assert row["differing_prompts"] == 1
    assert row["levels"][1]["acceptance"] == 0.5 and row["levels"][1]["time_share"] == 0.25


@pytest.mark.parametrize("args, message", [
    (["--prompts", "/nonexistent/prompts.jsonl"], "no such prompts file"),
    (["--pipelines", "target,warp-drive"], "unknown pipeline 'warp-drive'"),
    (["--threads", "0"], "--threads must be 1 or more"),
    (["--remote-verify", "/nonexistent/target.gguf"], "/nonexistent/target.gguf: no such GGUF file"),
    (["--temperature", "warm"], "--temperature: give comma-separated numbers from 0.0 to 10.0, not 'warm'"),
    (["--temperature", "0.7", "--top-p", "0"], "--top-p: give comma-separated numbers from 0.01 to 1.0, not '0'"),
    (["--temperature", "0.7", "--seeds", "0"], "--seeds must be 1 or more"),
    (["--temperature", "0.7", "--repeats", "0"], "--repeats must be 1 or more"),
])
def test_bad_options_are_one_line_errors(args, message, tmp_path, capsys):
    assert main(["bench", "--out", str(tmp_path), *args]) == 1
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_models_directory_without_a_pair_is_a_one_line_error(tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "x", "messages": [{"role": "user", "content": "hi"}]}\n')
    (tmp_path / "models" / "target").mkdir(parents=True)
    assert main(["bench", "--out", str(tmp_path), "--prompts", str(prompts), "--models", str(tmp_path / "models"),
                 "--cache", str(tmp_path / "cache")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{tmp_path / 'models'}: holds no checkpoint pair" in err


def test_malformed_prompt_line_names_the_line(tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "x", "messages": [{"role": "user", "content": "hi"}]}\n{"id": "y"}\n')
    assert main(["bench", "--out", str(tmp_path), "--prompts", str(prompts)]) == 1
    assert f"{prompts}:2: needs 'messages'" in capsys.readouterr().err


@pytest.mark.slow
def test_workload_b_padded_pair_runs_identical_and_is_memory_bound(tmp_path):
    pytest.importorskip("llama_cpp")
    out = tmp_path / "out"
    done = bench("--workload", "b", "--limit", "1", "--max-tokens", "16", "--threads", "1", "--sweep-lengths", "4",
                 "--pipelines", "target,sd-draft,mlsd,llama.cpp", "--out", str(out), "--cache", str(tmp_path / "cache"))
    assert done.returncode == 0, done.stderr[-2000:]
    workload = json.loads((out / "bench.json").read_text())["workloads"]["b"]
    assert workload["workload"]["file_bytes"]["target"] > 1.5e9
    ratio = workload["workload"]["parameters"]["target"] / workload["workload"]["parameters"]["draft"]
    assert 12 < ratio < 16
    for key, row in workload["summary"].items():
        assert row["differing_prompts"] == 0 or key == "llama.cpp-plain", key


def test_serving_run_compares_the_server_with_in_process_generation(tmp_path, demo_set):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "fib", "messages": [{"role": "user", "content": "def fibonacci(n):"}]}\n'
                       '{"id": "stack", "messages": [{"role": "user", "content": "class Stack:"}]}\n')
    done = bench("--serving", "--prompts", str(prompts), "--max-tokens", "16", "--threads", "1",
                 "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "out" / "serving.json").read_text())
    assert [row["id"] for row in result["rows"]] == ["fib", "stack"] and result["model_set"] == "demo"
    assert all(row["served_tps"] > 0 and row["direct_tps"] > 0 for row in result["rows"])
    assert "served / direct tokens/s" in done.stdout and result["machine"]["cpu"]


def test_sampled_serving_run_compares_the_chain_with_the_target_alone(tmp_path, demo_set):
    """`--serving --temperature`: two real servers, seeded sampled requests; a seed's answers must be the same text
    from both (the run fails otherwise), so every row is a like-for-like ratio."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "fib", "messages": [{"role": "user", "content": "def fibonacci(n):"}]}\n')
    done = bench("--serving", "--temperature", "0.8", "--seeds", "2", "--prompts", str(prompts), "--max-tokens", "16",
                 "--threads", "1", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "out" / "serving-sampled.json").read_text())
    (row,) = result["rows"]
    assert row["id"] == "fib" and row["tokens"] > 16 and row["chain_tps"] > 0 and row["target_tps"] > 0
    assert result["temperature"] == 0.8 and result["lowest"] == row["chain_over_target"]
    assert "at temperature 0.8" in done.stdout
    refused = bench("--serving", "--temperature", "0.3,0.8", "--out", str(tmp_path / "no"))
    assert refused.returncode == 1 and "one --temperature" in refused.stderr


def test_attached_run_compares_the_chain_with_and_without_the_ngram_level(tmp_path, demo_set):
    done = bench("--attached", "--limit", "2", "--max-tokens", "16", "--threads", "1", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "attached.json").read_text())
    assert result["roles_with"] == ["target", "mxfp4", "draft", "ngram"]
    assert result["roles_without"] == ["target", "mxfp4", "draft"]
    assert len(result["rows"]) == 2 and all(row["prompt_tokens"] > 300 for row in result["rows"])  # a file is in it
    assert all(row["with_tps"] > 0 and row["without_tps"] > 0 for row in result["rows"])
    assert "with / without the n-gram level" in done.stdout


def test_remote_run_puts_the_target_behind_a_delayed_link(tmp_path, demo_set):
    """`bench --remote`: real ggml-rpc-servers (in a network namespace where the test may make one), the target on
    one server and split over two, a relay per delay; the chain and the remote target alone answer as the local
    target does, and a greedy verification round brings back token ids, less than one row of logits."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "fib", "messages": [{"role": "user", "content": "def fibonacci(n):"}]}\n')
    done = bench("--remote", "--delays", "0,20", "--prompts", str(prompts), "--max-tokens", "16", "--threads", "1",
                 "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "out" / "remote.json").read_text())
    assert [(row["servers"], row["delay_ms"]) for row in result["rows"]] == [(1, 0), (1, 20), (2, 0), (2, 20)]
    assert result["differing_from_local_target"] == 0
    for servers in (1, 2):
        alone = [row["alone_tps"] for row in result["rows"] if row["servers"] == servers]
        assert alone[1] < alone[0] and alone[1] < 1000 / 20  # every target round pays the 20 ms
    vocabulary = 8192  # the demo set's
    for row in result["rows"]:
        for way in ("alone", "chain"):
            assert 0 < row["traffic"][way]["received_per_round"] < vocabulary * 4  # less than a row of logits
        assert row["roles"] == ["target", "mxfp4", "draft", "ngram"]
    assert "| 2 | 20 ms |" in done.stdout and "differing from the local target: 0" in done.stdout


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="network namespaces need root and ip")
def test_a_namespace_left_by_a_killed_bench_is_removed_and_does_not_block_the_next(tmp_path):
    """A bench killed before its cleanup leaves its namespace (and veth pair with addresses) behind; the next run
    deletes it and its own stand-in machine still answers."""
    leaked = subprocess.run([sys.executable, "-c", "import os, signal\nfrom assistant.bench import remote\n"
                             "print(remote._make_namespace(), flush=True)\nos.kill(os.getpid(), signal.SIGKILL)"],
                            capture_output=True, text=True).stdout.strip()
    assert leaked.startswith("assistant-bench-") and leaked in namespaces()
    with remote.RemoteMachine(1, 1, say=lambda line: None) as machine:
        assert machine.namespace and leaked not in namespaces()
        socket.create_connection(machine.endpoints[0], timeout=5).close()
    assert machine.namespace is None and not any(name.startswith("assistant-bench-") for name in namespaces())


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None, reason="network namespaces need root and ip")
def test_a_remote_bench_stopped_by_sigterm_removes_its_namespace_and_servers(tmp_path, demo_set):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "fib", "messages": [{"role": "user", "content": "def fibonacci(n):"}]}\n')
    run = subprocess.Popen([sys.executable, "-m", "assistant", "bench", "--remote", "--delays", "0,0,0,0,0,0,0,0",
                            "--prompts", str(prompts), "--max-tokens", "64", "--threads", "1", "--out", str(tmp_path)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    name, server = f"assistant-bench-{run.pid}", f"-H {remote._addresses(run.pid)[1]} "
    try:
        deadline = time.monotonic() + 120
        while name not in namespaces() or not running(server):
            assert run.poll() is None and time.monotonic() < deadline, run.stderr and run.stderr.read()
            time.sleep(0.2)
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=60) == -signal.SIGTERM
    finally:
        run.kill()
        run.wait()
    assert name not in namespaces() and not running(server)


def running(pattern: str) -> bool:
    return subprocess.run(["pgrep", "-f", "--", pattern], capture_output=True).returncode == 0


def namespaces() -> list[str]:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout.split()


@pytest.fixture
def tiny_set(tiny_checkpoint, tmp_path):
    """A registered three-level set of tiny random models: a target, its MXFP4 copy, a smaller random draft."""
    from assistant import modelsets
    from converters import convert

    target = convert(tiny_checkpoint(seed=0), outdir=tmp_path, name="target", types=("bf16", "mxfp4"), progress=False)
    draft = convert(tiny_checkpoint(seed=1, intermediate_size=64), outdir=tmp_path, name="draft", types=("mxfp4",),
                    progress=False)
    return modelsets.register("tiny", [modelsets.Level("target", target["bf16"]),
                                       modelsets.Level("mxfp4", target["mxfp4"]),
                                       modelsets.Level("draft", draft["mxfp4"])], make_default=True)


@pytest.mark.parametrize("chosen", [("--set", "tiny"), ("--workload", "demo")])
def test_set_run_compares_its_chain_shapes_with_llama_cpps_own_programs(tmp_path, tiny_set, chosen):
    """`bench --set`: our chain shapes and llama.cpp's programs (llama-bench, llama-speculative-simple with each draft
    and with its n-gram lookup) really run, alternating, on the set's files; the report gives their command lines.
    `--workload demo` is the same on the demo set (here the tiny set registered as "demo" too)."""
    from assistant import modelsets

    name = chosen[1] if chosen[0] == "--set" else "demo"
    modelsets.register(name, tiny_set.levels)
    out = tmp_path / "out"
    done = bench(*chosen, "--limit", "2", "--max-tokens", "12", "--threads", "1", "--sweep-lengths", "2,3",
                 "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((out / "bench.json").read_text())["set"]
    runs, rows = record["runs"], record["summary"]["rows"]
    assert list(runs) == ["target", "target+mxfp4", "target+draft", "target+ngram", "default-chain",
                          "llama-bench-stock", "llama-bench-ours", "llama-spec-mxfp4", "llama-spec-draft",
                          "llama-spec-ngram"]
    assert record["order"][:4] == ["target", "llama-bench-stock", "target+mxfp4", "llama-bench-ours"]
    assert [row["method"] for row in record["llama_cpp_sweep"]] == ["llama-spec-mxfp4"] * 2 + ["llama-spec-draft"] * 2
    bin_dir = build.tools_dir()
    for key, records in runs.items():
        assert len(records) == 2 and all(r["new_tokens"] >= 1 and r["seconds"] > 0 for r in records), key
        if key.startswith("llama-"):
            program = next(word for word in shlex.split(records[0]["command"]) if "=" not in word)
            assert Path(program).parent == bin_dir and Path(program).is_file(), key
            settings = [word for word in shlex.split(records[0]["command"]) if "=" in word and word.startswith("ASSISTANT_")]
            assert ("ASSISTANT_BF16_KERNEL=stock" in settings) != (key == "llama-bench-ours")
        else:
            assert rows[key]["differing"] == 0, key
    assert " -pg " in runs["llama-bench-stock"][0]["command"]
    prompt_tokens = record["prompts"][0]["tokens"]
    assert f"-p {prompt_tokens} -n 0 -pg {prompt_tokens},12 " in runs["llama-bench-ours"][0]["command"]
    assert "--spec-type ngram-simple" in runs["llama-spec-ngram"][0]["command"]
    assert str(tiny_set.levels[2].path) in runs["llama-spec-draft"][0]["command"]
    assert rows["target"]["over_target"] == pytest.approx(1.0)
    assert rows["llama-bench-stock"]["over_plain_stock"] == pytest.approx(1.0)
    assert rows["default-chain"]["over_best_speculative"] > 0 and rows["target"]["after_prompt_over_plain_ours"] > 0
    text = (out / "bench.md").read_text()
    assert record["model_set"]["name"] == name and f"# `assistant bench --set {name}`" in text
    assert "CPU: " in text and "Goals (issue 40):" in text
    for key in runs:
        if key.startswith("llama-"):
            assert runs[key][0]["command"] in text, key


def test_set_run_on_a_missing_set_is_a_one_line_error(tmp_path, tiny_set, capsys):
    assert main(["bench", "--set", "nonesuch", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no model set named 'nonesuch' (registered: tiny)" in err


def test_temperature_run_compares_every_method_at_each_setting_with_llama_cpp(tmp_path, tiny_set):
    """`bench --temperature`: at each temperature and top-p, every method of ours (fixed draft lengths included)
    and llama-speculative-simple at the same setting really run on the set's files; every answer of ours for a
    seed is the target alone's for that seed; the report has a column per setting."""
    out = tmp_path / "out"
    done = bench("--temperature", "0,0.8", "--top-p", "1.0,0.9", "--set", "tiny", "--limit", "1", "--seeds", "2",
                 "--max-tokens", "10", "--threads", "1", "--sweep-lengths", "3", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((out / "sampled.json").read_text())
    record = result["record"]
    assert [(s["temperature"], s["top_p"]) for s in record["grid"]] == [(0.0, 1.0), (0.8, 1.0), (0.8, 0.9)]
    keys = [method["key"] for method in record["methods"]]
    assert keys == ["target", "target+mxfp4", "target+mxfp4-k3", "target+draft", "target+draft-k3", "target+ngram",
                    "default-chain", "llama-spec-mxfp4-k3", "llama-spec-draft-k3", "llama-spec-ngram"]
    assert len(record["rows"]) == len(keys) * (1 + 2 + 2)  # greedy once, each sampled setting per seed
    sampled_commands = [row["command"] for row in record["rows"] if "command" in row and row["temperature"] > 0]
    assert sampled_commands and all("--temp 0.8 " in command and "--seed " in command for command in sampled_commands)
    assert all(row["identical"] for row in record["rows"] if "identical" in row)
    assert all(setting["methods"]["target"]["median"] == 1.0 for setting in result["summary"])
    assert "| T=0.8 top-p=0.9 |" in (out / "sampled.md").read_text()


def test_repeated_passes_count_each_seed_by_its_median_time():
    """`--repeats`: a pass that the VM slowed (the 9.0 s below) does not decide a prompt's ratio."""
    from assistant.bench.sampled import summarize

    def row(method, seed, repeat, seconds):
        return {"method": method, "prompt": "p", "temperature": 0.7, "top_p": 1.0, "seed": seed, "repeat": repeat,
                "seconds": seconds, "new_tokens": 100, "identical": True, "levels": [{"role": "target"}]}

    rows = [row("target", seed, repeat, 2.0) for seed in (0, 1) for repeat in range(3)]
    rows += [row("default-chain", 0, 0, 1.0), row("default-chain", 0, 1, 9.0), row("default-chain", 0, 2, 1.0),
             row("default-chain", 1, 0, 1.0), row("default-chain", 1, 1, 1.0), row("default-chain", 1, 2, 1.0)]
    record = {"grid": [{"temperature": 0.7, "top_p": 1.0}], "rows": rows}
    chain = summarize(record)[0]["methods"]["default-chain"]
    assert chain["median"] == chain["lowest"] == 2.0


def test_the_large_workload_reports_loading_memory_and_decoding(tmp_path):
    """bench --workload 7b's measurements, on a small shape of the same architecture: every figure comes from a
    real load, a real decode and llama-bench on the same files."""
    from assistant.bench import large
    from native import bench as kernel_bench
    from native.bench.models import Shape

    shape = Shape(hidden=256, layers=2, intermediate=512, heads=4, kv_heads=2, vocab=1024)
    files = large.prepare(tmp_path, shape, say=lambda _: None)
    assert all(path.stat().st_size > 0 for path in files.values())
    result = large.run(files, kernel_bench.native_dir() / "bin", bandwidth_gbps=10.0, threads=1, tokens=4,
                       say=lambda _: None)
    summary = large.summary(result)
    for state in ("cold", "warm"):
        for weights in ("packed", "mapped"):  # the target copied into our layout, or read where the file is mapped
            assert result[f"read_seconds_{state}_{weights}"] > 0 and result[f"target_{state}_{weights}"]["load_seconds"] > 0
            assert result[f"target_{state}_{weights}"]["new_tokens"] == 4
    assert result["chain_packed"]["peak_rss_bytes"] > result["file_bytes"]["target"]
    assert summary["chain_load_over_read"] > 0 and summary["chain_load_over_read_mapped"] > 0
    assert summary["chain_load_over_read_cold"] > 0 and summary["chain_load_over_read_cold_mapped"] > 0
    assert summary["decode_over_light"] > 0 and summary["decode_over_light_mapped"] > 0
    assert summary["target_verify_16_over_1"] > 0 and summary["load_over_read_warm_mapped"] > 0
    for key in ("target_ours", "target_ours-mapped", "target_stock", "mxfp4_ours", "mxfp4_stock"):
        assert set(result[f"llama_bench_{key}"]["batch_ms"]) == set(large.VERIFY_BATCHES)
    text = large.markdown(result)
    assert "| loading it |" in text and "Mapped weights (ASSISTANT_WEIGHTS=mapped)" in text
    assert text.count("of the speed of light") == 2 and "| target, ours-mapped |" in text
    assert text.count("x reading them, ") == 2 and text.count(" s cold, ") == 2
