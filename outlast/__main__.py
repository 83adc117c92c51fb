from outlast.cli import main

main()
