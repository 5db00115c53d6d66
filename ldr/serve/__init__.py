"""`ldr serve`: one index over HTTP (FastAPI + uvicorn, extra `[server]`), and a client for it."""
