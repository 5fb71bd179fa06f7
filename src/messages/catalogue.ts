import { HandlerCatalogue } from '../outbox/index.ts';
import { SUBSCRIPTIONS } from './subscriptions.ts';

/**
 * The catalogue of SUBSCRIPTIONS, built once: what the API (admin views, metrics) reads to know
 * which topics are handled and by whom. Kept out of ./subscriptions.ts, which imports only a type:
 * the list itself stays plain data that pulls in no code.
 */
export const HANDLER_CATALOGUE = new HandlerCatalogue(SUBSCRIPTIONS);
