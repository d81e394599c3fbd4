from npukit.cli.main import main

raise SystemExit(main())
