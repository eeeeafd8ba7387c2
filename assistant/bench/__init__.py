"""`assistant bench`: every pipeline the ML-SpecQD paper compares, plus llama.cpp's own speculative
decoding, timed in one interleaved run on the same GGUF files, and a report beside the paper's tables.

    workloads   the bench pair as is (a) and padded to a memory-bound size (b), converted and cached
    pipelines   what is compared: (i)-(v), (vii) in worker processes, (vi) as llama.cpp's own program
    worker      a process that loads GGUFs once and runs pipelines on request (one per kernel setting)
    llamacpp    runs and parses llama-speculative-simple
    runner      the interleaved loop: warm-up, sweep, prompt by prompt, identity check
    summary     per-pipeline aggregates: geomean speedup, acceptance per level, time shares
    report      bench.json and bench.md;  charts: the PNGs
"""
