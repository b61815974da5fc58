import sys

from release import early

early.start(sys.argv[1:])  # an audit's wheel starts hashing while the commands are imported

from release.cli import main  # noqa: E402

sys.exit(main())
