"""What `bench --set` compares on a registered model set: our chain shapes, and llama.cpp's own programs on the
same GGUF files as baselines.

Ours run in a bench worker with our kernels: the target alone, the target with each draft of the set (adaptive
draft lengths), the target with the n-gram level, and the set's default chain (every model level and the
n-gram level, as `assistant generate` runs it). llama.cpp's run as its programs: `llama-bench` for plain
decoding (with its stock kernels, what a llama.cpp user gets, and with ours under it), `llama-speculative-simple`
with each draft of the set at its best draft length, and with its n-gram lookup.
"""

from __future__ import annotations

from dataclasses import dataclass

from assistant.bench import llamabench, llamacpp

TARGET = "target"
DEFAULT = "default-chain"
PLAIN_STOCK, PLAIN_OURS = "llama-bench-stock", "llama-bench-ours"
NGRAM_BASELINE = "llama-spec-ngram"
SPECULATIVE_PREFIX = "llama-spec-"


@dataclass(frozen=True)
class Method:
    key: str
    label: str
    program: str | None = None  # None: ours, in the worker; else the llama.cpp program that runs it
    levels: tuple[int, ...] = (0,)  # indexes into the model set's levels
    ngram: bool = False
    stock: bool = False  # llama.cpp's own kernels (ASSISTANT_*_KERNEL=stock)

    @property
    def env(self) -> dict[str, str]:
        return dict(llamacpp.STOCK_KERNELS) if self.stock else {}

    @property
    def ours(self) -> bool:
        return self.program is None

    def worker_spec(self, model_set) -> dict:
        """How the bench worker loads this pipeline of ours."""
        chosen = [model_set.levels[index] for index in self.levels]
        return {"paths": [str(level.path) for level in chosen], "roles": [level.role for level in chosen],
                "draft_length": "adaptive", "confidence": None, "ngram": self.ngram}


def ours(model_set) -> list[Method]:
    roles = [level.role for level in model_set.levels]
    methods = [Method(TARGET, "ours: target alone")]
    for index, role in enumerate(roles[1:], start=1):
        methods.append(Method(f"target+{_name(roles, index)}", f"ours: target <- {role} (adaptive draft lengths)",
                              levels=(0, index)))
    methods.append(Method("target+ngram", "ours: target <- n-gram level (adaptive)", ngram=True))
    if len(roles) > 1:
        chain = " <- ".join([*roles, "n-gram"])
        methods.append(Method(DEFAULT, f"ours: default chain {chain} (as `assistant generate`)",
                              levels=tuple(range(len(roles))), ngram=True))
    return methods


def baselines(model_set) -> list[Method]:
    roles = [level.role for level in model_set.levels]
    methods = [
        Method(PLAIN_STOCK, "llama.cpp plain decoding, stock kernels (llama-bench pp + pg)", llamabench.PROGRAM,
               stock=True),
        Method(PLAIN_OURS, "llama.cpp plain decoding, our kernels (llama-bench pp + pg)", llamabench.PROGRAM),
    ]
    for index, role in enumerate(roles[1:], start=1):
        methods.append(Method(SPECULATIVE_PREFIX + _name(roles, index),
                              f"llama.cpp speculative, {role} as draft, best draft length, stock kernels",
                              llamacpp.PROGRAM, levels=(0, index), stock=True))
    methods.append(Method(NGRAM_BASELINE, f"llama.cpp n-gram speculation ({llamacpp.NGRAM}), stock kernels",
                          llamacpp.PROGRAM, ngram=True, stock=True))
    return methods


def speculative_with_draft(method: Method) -> bool:
    return method.program == llamacpp.PROGRAM and not method.ngram


def _name(roles: list[str], index: int) -> str:
    """A level's role, with its index where another level has the same role."""
    return roles[index] if roles.count(roles[index]) == 1 else f"{roles[index]}{index}"
