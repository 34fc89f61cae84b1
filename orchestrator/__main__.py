from orchestrator.cli import app

app(prog_name="orchestrate")
