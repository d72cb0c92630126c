from rocmlock.cli import run

run()
