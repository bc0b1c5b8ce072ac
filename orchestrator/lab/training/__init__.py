"""How the lab's models are made: the corpus, the tokenizer, the target and EAGLE-3 draft training in a pinned child
process, the draft's on-disk layouts, and the build-once model cache keyed by the declared recipe."""
