// Preloaded into the API process by bench/big-bodies.ts (`node --import`): the event loop's
// delay, printed as one line on stderr and started over at each SIGUSR2.
import { monitorEventLoopDelay } from "node:perf_hooks";

const histogram = monitorEventLoopDelay({ resolution: 10 });
histogram.enable();
let peakRss = 0;
setInterval(() => {
  peakRss = Math.max(peakRss, process.memoryUsage.rss());
}, 50).unref();
process.on("SIGUSR2", () => {
  const ms = (ns) => Math.round(ns / 1e4) / 100;
  const line = {
    p50: ms(histogram.percentile(50)),
    p99: ms(histogram.percentile(99)),
    max: ms(histogram.max),
    peakRssMb: Math.round(Math.max(peakRss, process.memoryUsage.rss()) / 1e6),
  };
  process.stderr.write(`loop-delay ${JSON.stringify(line)}\n`);
  histogram.reset();
  peakRss = 0;
});
