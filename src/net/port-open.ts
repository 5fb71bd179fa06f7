import net from 'node:net';

/** Whether something accepts TCP connections on 127.0.0.1:`port` now (a server up, or back after a stop). */
export function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}
