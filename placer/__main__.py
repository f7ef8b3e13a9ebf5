from placer.cli import run

run()
