# The options both private servers' start scripts (prosody/start.sh, ejabberd/start.sh) take,
# sourced by them: -b|--background, --stop, -h|--help (prints the caller's header comment).
background=0
stop=0
for arg in "$@"; do
	case "$arg" in
		-b|--background) background=1 ;;
		--stop) stop=1 ;;
		-h|--help) sed -n '2,/^set -eu$/{/^#/p}' "$0"; exit 0 ;;
		*) echo "unknown argument: $arg (try --help)" >&2; exit 2 ;;
	esac
done
