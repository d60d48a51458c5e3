from wm.cli import main

raise SystemExit(main())
