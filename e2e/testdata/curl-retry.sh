#!/bin/sh
# curl-retry.sh URL KEY BODY: a plain curl retry loop, as a shell client
# would write one. It POSTs BODY to URL with the Idempotency-Key KEY until it
# gets an answer that is neither a 409 (in progress) nor a 5xx, and no
# connection error, at most 10 times 0.2 s apart; then it prints the answer's
# body and, on the last line, its status, and exits 0 (1 when every try
# failed).
url=$1 key=$2 body=$3
for try in 1 2 3 4 5 6 7 8 9 10; do
	if out=$(curl -s -w '\n%{http_code}' -H 'Authorization: Bearer curl' -H 'Content-Type: application/json' \
		-H "Idempotency-Key: $key" --data "$body" "$url"); then
		case $(printf '%s\n' "$out" | tail -n 1) in
		409 | 5??) ;;
		*)
			printf '%s\n' "$out"
			exit 0
			;;
		esac
	fi
	sleep 0.2
done
exit 1
