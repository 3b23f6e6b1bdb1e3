from appserver.launch import main

raise SystemExit(main())
