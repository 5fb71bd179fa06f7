import type { TopicName } from '../../src/messages/topics.ts';
import type { Handler, HandlerContext } from '../../src/messages/handler.ts';

/** A handler for tests; topics outside TOPICS have no payload schema and are allowed here. */
export function testHandler(
  name: string,
  topic: string,
  handle: (ctx: HandlerContext<TopicName>) => Promise<void> = async () => {},
): Handler<any> {
  return { name, topic: topic as TopicName, handle };
}
