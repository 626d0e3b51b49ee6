#!/bin/bash
# run the two-client scenario N times; print timing and status
bin=${1:-./lesson13}
for i in $(seq 1 ${2:-10}); do
  s=$(date +%s.%N)
  timeout 40 $bin -p 18600 --timeout 20 -c 2 --srq-size 8 --limit 2 > /tmp/s.out 2>&1 & sp=$!
  sleep 0.3
  timeout 30 $bin -p 18600 --timeout 20 127.0.0.1 -n 10 > /tmp/c1.out 2>&1 & c1=$!
  timeout 30 $bin -p 18600 --timeout 20 127.0.0.1 -n 10 > /tmp/c2.out 2>&1; r2=$?
  wait $c1; r1=$?; wait $sp; rs=$?
  e=$(date +%s.%N)
  echo "run $i: server $rs c1 $r1 c2 $r2 $(awk -v a=$s -v b=$e 'BEGIN{printf "%.2f s", b-a}') $(tail -1 /tmp/s.out)"
  if [ $rs != 0 ]; then tail -5 /tmp/s.out; cat /tmp/c1.out | tail -3; tail -3 /tmp/c2.out; fi
done
