"""Editor support: ``tfspec lsp`` is a Language Server Protocol server (``server``) over the answers that
``language`` computes from the checker itself."""
