/**
 * For processes started by `npm start`'s supervisor (scripts/start.ts), which opens an IPC channel
 * to each child. If the supervisor dies without stopping us (SIGKILL, a crash), the channel
 * disconnects: we then stop ourselves gracefully instead of living on as an orphan that holds the
 * port. Does nothing for a process started any other way.
 */
export function stopWhenSupervisorDies(): void {
  if (!process.send || !process.channel) return;
  // The channel must not keep the process alive once its work is done.
  process.channel.unref();
  process.once('disconnect', () => process.kill(process.pid, 'SIGTERM'));
}
