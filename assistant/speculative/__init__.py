"""ML-SpecQD: multi-level speculative decoding over a chain of llama.cpp contexts, target first.

    with Pipeline.load(model_set) as pipeline:
        for event in pipeline.chat(messages):
            ...  # TokenEvent per accepted token, then one Stats
"""

from assistant.speculative.events import LevelStats, Sampling, Stats, TokenEvent
from assistant.speculative.pipeline import Pipeline

__all__ = ["LevelStats", "Pipeline", "Sampling", "Stats", "TokenEvent"]
