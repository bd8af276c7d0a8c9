from gpudash.cli import main

raise SystemExit(main())
