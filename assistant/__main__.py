from assistant.cli import main

if __name__ == "__main__":  # a spawned worker process imports this module again: it must not run the CLI
    raise SystemExit(main())
