"""Code generation: the graph IR -> a trainable ``nn.Module`` (``compiler``) and a standalone PyTorch file (``standalone``), from one layer generator."""
