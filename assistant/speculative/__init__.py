"""ML-SpecQD: multi-level speculative decoding over a chain of llama.cpp contexts, target first.

    with Pipeline.load(model_set) as pipeline:
        answer = pipeline.chat(messages)
        for event in answer:
            ...  # a TokenEvent per accepted token, as it comes
        answer.text, answer.tokens, answer.stats  # the whole answer once it has ended
"""

from assistant.speculative.events import Generation, LevelStats, Sampling, Stats, TokenEvent
from assistant.speculative.pipeline import Pipeline

__all__ = ["Generation", "LevelStats", "Pipeline", "Sampling", "Stats", "TokenEvent"]
