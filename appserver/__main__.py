from appserver.cli import main

raise SystemExit(main())
