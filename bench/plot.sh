#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Draws the contended scenario's wait distributions, one line per worker
# count, from the files rlock-bench --plot DIR wrote (gnuplot; Debian's
# gnuplot-nox).
#   bench/plot.sh DIR WORK_US OUT.png
set -euo pipefail
dir=$1 work=$2 out=$3
command -v gnuplot >/dev/null || { echo "bench/plot.sh: needs gnuplot (apt-get install gnuplot-nox)" >&2; exit 69; }
files=()
for w in 1 2 4 8 16; do
    f="$dir/waits-w$w-work$work.dat"
    [ -s "$f" ] && files+=("'$f' using 1:2 with lines lw 2 title 'W = $w'")
done
[ ${#files[@]} -gt 0 ] || { echo "bench/plot.sh: no waits-w*-work$work.dat in $dir" >&2; exit 66; }
plot=$(IFS=,; echo "${files[*]}")
gnuplot <<GP
set terminal png size 900,520 noenhanced
set output '$out'
set title "rlock: wait from lock call to lock held, W processes on one name, $work us of work"
set xlabel 'wait (ms)'
set ylabel 'share of acquisitions waiting at most this long'
set key bottom right
set grid
set yrange [0:1]
plot $plot
GP
echo "wrote $out"
