import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import * as service from '../../properties/properties.service.ts';
import {
  availabilityQuery,
  availabilityResponse,
  idParams,
  propertyBody,
  propertyPatchBody,
  propertyResponse,
} from '../../properties/properties.schemas.ts';
import { currentUser } from '../plugins/auth.ts';
import type { AppContext } from '../context.ts';

export const propertyRoutes: FastifyPluginAsyncZod<AppContext> = async (app, ctx) => {
  const deps = { db: ctx.db.db, afterPropertyCommit: ctx.afterPropertyCommit };

  app.post(
    '/properties',
    {
      onRequest: app.requireRole('host'),
      schema: { tags: ['properties'], body: propertyBody, response: { 201: propertyResponse } },
    },
    async (request, reply) => reply.status(201).send(await service.createProperty(deps, currentUser(request), request.body)),
  );

  app.patch(
    '/properties/:id',
    {
      onRequest: app.authenticate,
      schema: { tags: ['properties'], params: idParams, body: propertyPatchBody, response: { 200: propertyResponse } },
    },
    async (request) => service.updateProperty(deps, currentUser(request), request.params.id, request.body),
  );

  app.get(
    '/properties/:id',
    { schema: { tags: ['properties'], params: idParams, response: { 200: propertyResponse } } },
    async (request) => service.getProperty(deps, request.params.id),
  );

  app.get(
    '/properties/:id/availability',
    {
      schema: {
        tags: ['properties'],
        params: idParams,
        querystring: availabilityQuery,
        response: { 200: availabilityResponse },
      },
    },
    async (request) => service.getAvailability(deps, request.params.id, request.query.from, request.query.to),
  );
};
