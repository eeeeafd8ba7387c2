"""The compared pipelines, named once so the runner, the summary and the report agree.

Each of ours is a chain of roles (``target``: BF16 target, ``mxfp4``: its MXFP4 direct cast, ``draft``: the
small draft in BF16 as in the paper, ``draft-mxfp4``: the small draft in MXFP4 as the demo set and
``assistant pull`` ship it) with a draft length (exactly 8 as in the paper, or our adaptive policy) and a kernel setting: "stock"
runs in a worker started with ASSISTANT_MXFP4_KERNEL=stock, llama.cpp's own MXFP4 path (Table III).
"""

from __future__ import annotations

from dataclasses import dataclass

from assistant.cpu import STOCK_KERNELS

PAPER_LENGTH = 8
NGRAM_LENGTH = 15  # a batch of 16, the target's flat verification on our kernels


@dataclass(frozen=True)
class PipelineSpec:
    key: str
    label: str
    roles: tuple[str, ...]
    draft_length: int | str
    kernel: str = "ours"  # "ours", "stock" (ASSISTANT_MXFP4_KERNEL) or "llama.cpp" (all stock, see env)
    lookup: bool = False  # the n-gram level below the last model even at a fixed length

    @property
    def confidence(self) -> float | None:
        """The paper's fixed k drafts exactly k tokens (0: no early stop on low draft confidence, as
        llama.cpp's default p_min); the adaptive pipeline keeps the coordinator's default early stop."""
        return 0.0 if isinstance(self.draft_length, int) else None

    @property
    def ngram(self) -> bool:
        """The adaptive policy gets the n-gram level below the last model, as in the product; a fixed pipeline
        only when it is the n-gram pipeline."""
        from assistant.speculative.pipeline import default_ngram

        return self.lookup or default_ngram(self.draft_length, len(self.roles))

    @property
    def env(self) -> dict[str, str]:
        if self.kernel == "llama.cpp":  # what a user of plain llama.cpp runs: its kernels, its default context
            return {**STOCK_KERNELS,
                    "ASSISTANT_TARGET_MIN_BATCH": "1", "ASSISTANT_TARGET_FLASH_ATTENTION": "auto"}
        return {"ASSISTANT_MXFP4_KERNEL": "stock"} if self.kernel == "stock" else {}


BASELINE = "target"
LLAMA_CPP = "llama.cpp"
PLAIN = "llama.cpp-plain"  # the second baseline: llama.cpp's stock kernels and settings, in our decoding loop

OURS = (
    # Not llama.cpp's own program (our Python loop's overhead is in it): `bench --set` measures llama-bench itself.
    PipelineSpec(PLAIN, "(o) stock llama.cpp kernels and settings in our decoding loop (BF16, greedy)", ("target",),
                 1, "llama.cpp"),
    PipelineSpec("target", "(i) target alone (BF16, greedy; our kernels, lossless set-up)", ("target",), 1),
    PipelineSpec("sd-draft", "(ii) SD, small draft, k=8", ("target", "draft"), PAPER_LENGTH),
    PipelineSpec("sd-mxfp4", "(iii) SD, MXFP4 draft, k=8", ("target", "mxfp4"), PAPER_LENGTH),
    # Prompt lookup alone, as llama.cpp's n-gram speculation drafts: nothing to evaluate, so up to the most the
    # target verifies for about the price of one token. The adaptive policy's n-gram level, as a rival of it.
    PipelineSpec("sd-ngram", "(ix) SD, n-gram prompt lookup, k=15", ("target",), NGRAM_LENGTH, lookup=True),
    PipelineSpec("mlsd", "(iv) ML-SpecQD, 3 levels, k=8", ("target", "mxfp4", "draft"), PAPER_LENGTH),
    PipelineSpec("mlsd-adaptive", "(v) ML-SpecQD, adaptive policy (chain shape and k; + n-gram level)",
                 ("target", "mxfp4", "draft"), "adaptive"),
    # The product's chain: the small draft in MXFP4 too, with its single-level counterpart for a fair ranking.
    PipelineSpec("sd-draft-mxfp4", "(ii') SD, small draft in MXFP4, k=8", ("target", "draft-mxfp4"), PAPER_LENGTH),
    PipelineSpec("mlsd-adaptive-mxfp4", "(v') ML-SpecQD, adaptive k, small draft in MXFP4 (the demo set's chain)",
                 ("target", "mxfp4", "draft-mxfp4"), "adaptive"),
    # A model set without a small draft: the adaptive policy over the MXFP4 copy and the n-gram level.
    PipelineSpec("mxfp4-adaptive", "(viii) adaptive policy, no small draft (MXFP4 copy + n-gram level)",
                 ("target", "mxfp4"), "adaptive"),
    PipelineSpec("sd-mxfp4-stock", "(vii) SD, MXFP4 draft, k=8, stock MXFP4 kernel", ("target", "mxfp4"),
                 PAPER_LENGTH, "stock"),
    PipelineSpec("mlsd-stock", "(vii) ML-SpecQD, k=8, stock MXFP4 kernel", ("target", "mxfp4", "draft"),
                 PAPER_LENGTH, "stock"),
    PipelineSpec("mlsd-adaptive-stock", "(vii) ML-SpecQD, adaptive k, stock MXFP4 kernel",
                 ("target", "mxfp4", "draft"), "adaptive", "stock"),
)
# The bar for the adaptive policy: within 5% of the best fixed pipeline it could have been.
ADAPTIVE_RIVALS = {"mlsd-adaptive": ("target", "sd-draft", "sd-mxfp4", "mlsd", "sd-ngram"),
                   "mlsd-adaptive-mxfp4": ("target", "sd-draft-mxfp4", "sd-mxfp4", "mlsd", "sd-ngram"),
                   "mxfp4-adaptive": ("target", "sd-mxfp4", "sd-ngram")}
ADAPTIVE_GOAL = 0.95

LLAMA_CPP_LABEL = "(vi) llama.cpp speculative-simple, best of sweep"

LABELS = {spec.key: spec.label for spec in OURS} | {LLAMA_CPP: LLAMA_CPP_LABEL}

# The paper's geomean speedups over the BF16 target (BENCHMARK.md): Table I (QA, Llama2-7B, 68M draft),
# Table II (code, Qwen2.5-Coder-7B, 0.5B draft), Table III (multi-level with FP32 FMAs instead of int8).
PAPER = {
    "target": {"qa": 1.00, "code": 1.00},  # the paper's baseline is the BF16 target decoding greedily
    "sd-draft": {"qa": 1.81, "code": 2.64, "acceptance_qa": 0.417, "acceptance_code": 0.62},
    "sd-mxfp4": {"qa": 1.86, "code": 2.03, "acceptance_qa": 0.712, "acceptance_code": 0.91},
    "mlsd": {"qa": 2.22, "code": 2.72},
    "mlsd-stock": {"code": 2.16},  # Table III: FP32 FMAs in place of the int8 kernel
}


def select(keys: list[str] | None) -> list[PipelineSpec]:
    """The pipelines to run, both baselines first; ``keys`` None means all."""
    if keys is None:
        return list(OURS)
    known = {spec.key for spec in OURS}
    unknown = [key for key in keys if key not in known and key != LLAMA_CPP]
    if unknown:
        from assistant.errors import AssistantError

        raise AssistantError(f"--pipelines: unknown pipeline {unknown[0]!r} (choose from {', '.join(sorted(known | {LLAMA_CPP}))})")
    chosen = [spec for spec in OURS if spec.key in keys or spec.key in (BASELINE, PLAIN)]
    return chosen
