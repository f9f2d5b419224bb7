"""What /healthz and /metrics answer: the site's checks and Prometheus' view of
it, read from every app. Above the apps it reads; the counters and logs they
write to are monitoring's, below them."""
