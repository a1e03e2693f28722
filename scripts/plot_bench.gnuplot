# Bus bandwidth vs message size for one collective (called by scripts/bench.sh):
#   gnuplot -e "datadir='build/bench'; coll='all_reduce'; outfile='x.png'" plot_bench.gnuplot
# Plots every non-empty <datadir>/<lib>_<coll>_<nranks>.dat ("size time_us busbw"
# lines): Theseus solid, OpenMPI dashed. Failed runs (empty files) are skipped.
set terminal pngcairo size 1000,620 enhanced font ",11"
set output outfile
set title sprintf("%s: bus bandwidth on host memory, Theseus vs OpenMPI", coll) noenhanced
set xlabel "message size (bytes)"
set ylabel "bus bandwidth (GB/s)"
set logscale x 2
set format x "2^{%L}"
set grid xtics ytics
set key top left noenhanced
set yrange [0:*]

files = system(sprintf("find '%s' -maxdepth 1 -name '*_%s_*.dat' -size +0 | sort", datadir, coll))
if (words(files) == 0) { print "no data for ".coll; exit }
# ".../theseus_all_reduce_4.dat" -> library and rank count
base(f) = f[strstrt(f, datadir) + strlen(datadir) + 1:strlen(f) - 4]
lib(f) = base(f)[1:strstrt(base(f), "_") - 1]
nr(f) = system(sprintf("basename '%s' .dat | sed 's/.*_//'", f))
label(f) = sprintf("%s %s ranks", lib(f) eq "theseus" ? "Theseus" : "OpenMPI", nr(f))
dash(f) = lib(f) eq "theseus" ? 1 : 2

plot for [f in files] f using 1:3 with linespoints lw 2 dt dash(f) pt 7 title label(f)
