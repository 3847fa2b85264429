#!/usr/bin/env bash
# curl against a running server: JSON and SSE answers, error objects, and /health and /metrics.
#   curl_client.sh BASE_URL MODEL
set -euo pipefail
base=$1
model=$2
root=${base%/v1}
body=$(curl -sS -f "$base/completions" -H 'Content-Type: application/json' \
  -d "{\"model\":\"$model\",\"prompt\":\"Hello\",\"max_tokens\":4}")
grep -q '"object":"text_completion"' <<< "$body"
sse=$(curl -sS -N -f "$base/chat/completions" -H 'Content-Type: application/json' \
  -d "{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":4,\"stream\":true}")
grep -q '^data: \[DONE\]$' <<< "$sse"
[ "$(grep -c '"finish_reason":"' <<< "$sse")" = 1 ]
code=$(curl -sS -o /tmp/curl_err.$$ -w '%{http_code}' "$base/completions" -H 'Content-Type: application/json' -d '{"prompt":')
[ "$code" = 400 ] && grep -q '"error"' /tmp/curl_err.$$
rm -f /tmp/curl_err.$$
curl -sS -f "$root/health" > /dev/null
metrics=$(curl -sS -f "$root/metrics")
grep -q '^tachyon:request_success_total' <<< "$metrics"
echo "curl: all checks passed"
