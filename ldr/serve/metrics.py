"""Prometheus metrics of one server (its own registry, so two apps in a process do not mix)."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Counter("ldr_requests", "HTTP requests answered", ["method", "endpoint", "status"],
                                registry=self.registry)
        self.errors = Counter("ldr_errors", "Requests answered with an error (4xx/5xx)", ["endpoint", "status"],
                              registry=self.registry)
        self.latency = Histogram("ldr_request_seconds", "Request latency", ["endpoint"], buckets=BUCKETS,
                                 registry=self.registry)
        self.generation = Gauge("ldr_index_generation", "Index generation searches read", registry=self.registry)
        self.documents = Gauge("ldr_index_documents", "Live documents in that generation", registry=self.registry)

    def observe(self, method: str, endpoint: str, status: int, seconds: float) -> None:
        self.requests.labels(method, endpoint, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)
        if status >= 400:
            self.errors.labels(endpoint, str(status)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
