"""Where dynsource's code runs and what a session keeps: the probe of Spark's Python workers and the local-store
warning (``deployment``), the log level in the workers (``logs``), a query's session settings read at once
(``settings``), and the bounded map of what a warm session keeps between queries (``lru``)."""
