"""Tables, the HTML page and its drill-down, terminal views and the notebook reader."""
