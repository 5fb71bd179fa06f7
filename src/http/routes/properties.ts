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
import { BODY_PROBLEMS, bearerAuth, problems } from '../plugins/openapi.ts';
import type { AppContext } from '../context.ts';

export const propertyRoutes: FastifyPluginAsyncZod<AppContext> = async (app, ctx) => {
  const deps = { db: ctx.db.db, afterPropertyCommit: ctx.afterPropertyCommit };

  app.post(
    '/properties',
    {
      onRequest: app.requireRole('host'),
      schema: {
        summary: 'List a property for rent (hosts)',
        tags: ['properties'],
        security: bearerAuth,
        body: propertyBody,
        response: {
          201: propertyResponse.describe('The property, listed'),
          ...problems('validation_failed', ...BODY_PROBLEMS, 'unauthorized', 'forbidden'),
        },
      },
    },
    async (request, reply) => reply.status(201).send(await service.createProperty(deps, currentUser(request), request.body)),
  );

  app.patch(
    '/properties/:id',
    {
      onRequest: app.authenticate,
      schema: {
        summary: 'Change some of a property (its host)',
        tags: ['properties'],
        security: bearerAuth,
        params: idParams,
        body: propertyPatchBody,
        response: {
          200: propertyResponse.describe('The property, changed'),
          ...problems('validation_failed', ...BODY_PROBLEMS, 'unauthorized', 'forbidden', 'not_found'),
        },
      },
    },
    async (request) => service.updateProperty(deps, currentUser(request), request.params.id, request.body),
  );

  app.get(
    '/properties/:id',
    {
      schema: {
        summary: 'One property',
        tags: ['properties'],
        params: idParams,
        response: { 200: propertyResponse.describe('The property'), ...problems('validation_failed', 'not_found') },
      },
    },
    async (request) => service.getProperty(deps, request.params.id),
  );

  app.get(
    '/properties/:id/availability',
    {
      schema: {
        summary: "A property's booked date ranges between two dates",
        tags: ['properties'],
        params: idParams,
        querystring: availabilityQuery,
        response: {
          200: availabilityResponse.describe("The property's booked date ranges within the window asked for"),
          ...problems('validation_failed', 'not_found'),
        },
      },
    },
    async (request) => service.getAvailability(deps, request.params.id, request.query.from, request.query.to),
  );
};
