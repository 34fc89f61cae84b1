__version__ = "0.5.23"  # replay of SGLang 0.5.23 (see launch_server.py)
