# shlib.sh: what the shell tests share. Source it after setting `fail=0`.
#   check MSG EXPR     a failed EXPR (eval'd) prints "FAIL: MSG", the test goes on
#   require MSG EXPR   the same, and the test ends (exit 1)
#   json EXPR          prints the Python expression EXPR of stdin's JSON as d
#   free_port          a TCP port free on 127.0.0.1 now
#   wait_green URL S   polls URL/health for 200 up to S seconds (0: green)
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; fi; }
require() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; exit 1; fi; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_green() {
	local end=$((SECONDS + $2))
	while [ $SECONDS -lt "$end" ]; do
		[ "$(curl -s -o /dev/null -m 2 -w '%{http_code}' "$1/health")" = 200 ] && return 0
		sleep 0.1
	done
	return 1
}
