"""Running models: training, data and corpora, decoding, several processes, checkpoints."""
