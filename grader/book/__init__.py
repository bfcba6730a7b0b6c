"""Building the published book: staging (execute, student view), the site, vendored assets, the chapter map."""
