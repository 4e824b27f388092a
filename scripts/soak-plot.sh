#!/usr/bin/env bash
# Plot the per-minute samples of `scripts/chaos.py soak` (CSV) as a PNG with gnuplot:
# RSS, open file descriptors, store file and WAL size, for the gateway and the node.
#   scripts/soak-plot.sh soak-samples.csv docs/img/soak.png
set -euo pipefail
csv=${1:?usage: soak-plot.sh SAMPLES.csv OUT.png}
out=${2:?usage: soak-plot.sh SAMPLES.csv OUT.png}
command -v gnuplot >/dev/null || { echo "gnuplot missing (apt-get install gnuplot-nox)" >&2; exit 1; }
gnuplot <<GP
set datafile separator ","
set terminal pngcairo size 1200,900 font "sans,10"
set output "$out"
set key autotitle columnhead
set multiplot layout 2,2 title "outpost soak: per-minute samples (gateway and node, separate namespaces)"
set xlabel "minute"
set grid
set title "RSS (MiB)"
plot "$csv" using 1:(\$2/1024) with linespoints title "gateway", "" using 1:(\$6/1024) with linespoints title "node"
set title "open file descriptors"
set yrange [0:*]
plot "$csv" using 1:3 with linespoints title "gateway", "" using 1:7 with linespoints title "node"
set title "store file (MiB)"
plot "$csv" using 1:(\$4/1048576) with linespoints title "gateway", "" using 1:(\$8/1048576) with linespoints title "node"
set title "WAL (MiB)"
plot "$csv" using 1:(\$5/1048576) with linespoints title "gateway", "" using 1:(\$9/1048576) with linespoints title "node"
unset multiplot
GP
echo "wrote $out"
