"""Reading the metrics a service recorded through an in-memory OpenTelemetry reader."""

from __future__ import annotations

from opentelemetry.sdk.metrics.export import InMemoryMetricReader


def points(reader: InMemoryMetricReader, name: str) -> list[tuple[dict, float]]:
    data = reader.get_metrics_data()
    return [
        (dict(point.attributes), getattr(point, "value", None))
        for resource in (data.resource_metrics if data else [])
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]
