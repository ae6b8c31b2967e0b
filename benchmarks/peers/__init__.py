"""Peers on the same models (issue 52): mem0 and A-Mem run locally beside membox_local, on the same build model
(served by llama-cpp-python's OpenAI-compatible server), the same embedder, the same data, the same answering step
and scorers. `python -m benchmarks.peers run|report`; docs/peers.md."""
