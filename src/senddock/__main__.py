from senddock.cli import main

main()
