from rocmlock.cli.main import run

run()
