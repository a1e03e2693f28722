# The `make run` demo's timeline (called by scripts/demo.sh):
#   gnuplot -e "dir='build/demo'; t0=20; t1=80; swap=23; outfile='build/demo/timeline.png'" plot_demo.gnuplot
# Bus bandwidth of every step of the static and the adaptive run (<dir>/static.steps and
# <dir>/adaptive.steps: "step busbw" lines) side by side, the window in which link 0 -> 1 was
# throttled (steps t0 to t1) shaded, and the adaptive run's first schedule swap (collective `swap`;
# a negative value: none) marked.
set terminal pngcairo size 1100,460 enhanced font ",11"
set output outfile
set multiplot layout 1,2 title "Theseus demo: allreduce bus bandwidth per training step, link 0 -> 1 throttled in the shaded window"
set xlabel "step"
set ylabel "bus bandwidth (GB/s)"
set grid ytics
set yrange [0:*]
set key top right noenhanced
set style rect fc rgb "#f4c7c3" fs solid 0.5 noborder
set object 1 rectangle from t0, graph 0 to t1, graph 1 behind
set title "static policy"
plot dir."/static.steps" using 1:2 with linespoints lw 1.5 pt 7 ps 0.5 lc rgb "#555555" title "static"
if (swap >= 0) {
  set arrow 1 from swap, graph 0 to swap, graph 1 nohead lw 2 dt 2 lc rgb "#1a73e8"
  set label 1 sprintf("swap at #%d", swap) at swap, graph 0.95 offset 1,0 tc rgb "#1a73e8"
}
set title "adaptive policy (policies/adaptive.json)"
plot dir."/adaptive.steps" using 1:2 with linespoints lw 1.5 pt 7 ps 0.5 lc rgb "#0b8043" title "adaptive"
unset multiplot
