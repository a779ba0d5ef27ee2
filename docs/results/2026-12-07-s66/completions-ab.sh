for i in 1 2 3 4; do
for side in base new; do
  d=/tmp/ab_base; [ $side = new ] && d=/work/main
  echo "== $side $i"; (cd $d && timeout 300 python examples/measure_net_costs.py --reps 300 --shapes 2x1,2x2,3x1 2>&1 | grep -E "^ +[0-9]+ +[0-9]+ ")
done; done
