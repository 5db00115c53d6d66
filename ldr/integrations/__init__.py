"""Retrievers for RAG frameworks (extras `[langchain]`, `[llamaindex]`) over a local index or a
running `ldr serve`."""
