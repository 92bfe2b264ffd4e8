"""Prometheus metrics: what gpupool exports (``catalog``), how the state gauges are computed
at scrape time (``gauges``), the counters and histograms updated as events happen
(``recorder``), and the registry and listener of a process (``exporter``)."""
